//! The one function of the C maths library that cobble calls, `pow`, defined here in Rust
//! (the `libm` crate, a port of musl's), so that executables linking this crate resolve it
//! without `libm.so.6`.
//!
//! tokio's scheduler calls `f64::powf` (its moving average of task poll times), the only
//! call into libm in the daemon. Loading libm for it cost every daemon about 0.5 MiB of
//! resident memory: the library's pages that mapping and fault-around brought in
//! (docs/architecture.md, "Decisions the benchmarks back"). A symbol defined in the
//! executable is found before any shared library's, and the linker drops a library nothing
//! needs (`--as-needed`, as rustc links).

/// `pow(3)`: `x` raised to the power `y`, as C's maths library defines it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
// SAFETY: the symbol has C's signature for `pow` and its meaning, so code that calls the C
// library's `pow` gets the same function; it calls nothing but pure Rust.
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn pow_is_the_c_librarys_pow() {
        for (x, y, want) in [
            (2.0, 10.0, 1024.0),
            (0.8, 3.0, 0.512_000_000_000_000_1),
            (2.0, -1.0, 0.5),
            (9.0, 0.5, 3.0),
            (0.0, 0.0, 1.0),
            (-8.0, 1.0 / 3.0, f64::NAN),
        ] {
            let got = super::pow(x, y);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "pow({x}, {y}) = {got}, not {want}"
            );
        }
    }
}
