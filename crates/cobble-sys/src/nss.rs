//! Name lookups in a static build: which of glibc's NSS sources may answer.
//!
//! glibc answers `getaddrinfo` (http and tcp checks, log targets, a client's `--http`
//! address) through the sources `/etc/nsswitch.conf` names, loading each one other than
//! those built into it (`files` and `dns`, since glibc 2.34) with `dlopen`. A dynamic cobble
//! loads them from the image's own glibc, which is what they were built for. A static cobble
//! would load them into a copy of glibc they were not built for: at best they are missing
//! (a bare image has none, and the lookup goes on without them), at worst a base image's
//! `libnss_*.so` from another glibc release runs inside cobble's and crashes it.
//!
//! So a static build pins every database to the sources built into it, before anything
//! looks a name up: `/etc/hosts`, then DNS through `/etc/resolv.conf`, as a cgo-less Go
//! binary such as Pebble resolves names; `files` for the others. Users and groups never go
//! through NSS at all (see [`crate::user`]). A dynamic build leaves glibc as the system
//! configures it.

/// Pins glibc's NSS databases to the sources built into it when cobble is linked
/// statically; does nothing in a dynamic build. Call once, before any thread starts.
pub fn use_builtin_sources_when_static() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
    {
        for (database, sources) in [
            (c"hosts", c"files dns"),
            (c"networks", c"files dns"),
            (c"services", c"files"),
            (c"protocols", c"files"),
            (c"passwd", c"files"),
            (c"group", c"files"),
            (c"shadow", c"files"),
            (c"initgroups", c"files"),
        ] {
            // SAFETY: both arguments are NUL-terminated strings that outlive the call;
            // glibc copies what it keeps. Called before the daemon or client starts a
            // thread, so no lookup runs concurrently with the reconfiguration.
            unsafe {
                __nss_configure_lookup(database.as_ptr(), sources.as_ptr());
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
unsafe extern "C" {
    /// glibc's `nss.h`: sets the sources of one database as if `nsswitch.conf` said so.
    fn __nss_configure_lookup(
        database: *const std::ffi::c_char,
        sources: *const std::ffi::c_char,
    ) -> std::ffi::c_int;
}
