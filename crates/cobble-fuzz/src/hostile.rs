//! Structure-aware inputs built to hurt a parser: nesting around and past the limits Pebble's
//! libraries keep (10 000 for Go's JSON scanner and for yaml.v3), alias bombs of any fan-out
//! and depth wherever a layer takes a value, and huge repetition. The bytes choose the shape;
//! the text is built from it, so a short input reaches depths and expansions that random text
//! never does.
//!
//! The properties: the parser answers (on a small stack: no depth the input asks for costs
//! recursion), nesting past the limit is refused in yaml.v3's words, and what is accepted is
//! no larger than yaml.v3's alias rule allows (a small multiple of the text).

use arbitrary::Unstructured;
use cobble_plan::Layer;

/// The nesting limit of Go's JSON scanner and of yaml.v3.
pub const LIMIT: usize = 10_000;

/// A depth: small, around the limit, or well past it.
pub fn depth(u: &mut Unstructured<'_>) -> arbitrary::Result<usize> {
    Ok(match u.int_in_range(0..=2)? {
        0 => u.int_in_range(1..=300)?,
        1 => u.int_in_range(LIMIT - 3..=LIMIT + 3)?,
        _ => u.int_in_range(LIMIT + 1..=20_000)?,
    })
}

/// Where a hostile value goes in a layer: the lines before it, its indentation, and the block
/// levels yaml.v3 counts before it (a sequence at its key's indentation adds none).
const PLACES: &[(&str, &str, usize)] = &[
    ("summary:", "", 0),
    (
        "services:\n  s:\n    override: replace\n    command: x\n    environment:",
        "      ",
        3,
    ),
    (
        "services:\n  s:\n    override: replace\n    command: x\n    after:",
        "      ",
        3,
    ),
    (
        "services:\n  s:\n    override: replace\n    command: x\n    rlimits:",
        "      ",
        3,
    ),
    (
        "checks:\n  c:\n    override: replace\n    http:\n      url: http://x\n      headers:",
        "        ",
        4,
    ),
];

/// Runs `f` on a thread with a small stack.
fn on_a_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("a thread")
        .join()
        .unwrap_or_else(|_| panic!("the parser panicked"))
}

/// Hostile layers: deep flow or block nesting, alias bombs, repetition.
pub fn hostile_layer(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let (head, indent, levels_before) = *u.choose(PLACES)?;
    let mut past_limit = false;
    let value = match u.int_in_range(0..=3)? {
        // Flow collections, closed or not.
        0 => {
            let n = depth(u)?;
            let open = *u.choose(&["[", "{a: ", "[{a: "])?;
            let per_level = if open == "[{a: " { 2 } else { 1 };
            let close = match open {
                "[" => "]",
                "{a: " => "}",
                _ => "}]",
            };
            past_limit = n * per_level > LIMIT;
            let closed = if u.arbitrary()? {
                close.repeat(n)
            } else {
                String::new()
            };
            format!(" {}x{closed}\n", open.repeat(n))
        }
        // Block sequences, each indented past the last.
        1 => {
            let n = depth(u)?;
            past_limit = levels_before + n > LIMIT;
            format!("\n{indent}{}x\n", "- ".repeat(n))
        }
        // An alias bomb: `levels` levels, each `fan` aliases of the one before.
        2 => {
            let levels = u.int_in_range(1..=12)?;
            let fan = u.int_in_range(1..=12)?;
            let mut text = format!("\n{indent}l0: &l0 [{}]\n", vec!["lol"; fan].join(", "));
            for level in 1..levels {
                let aliases = vec![format!("*l{}", level - 1); fan].join(", ");
                text.push_str(&format!("{indent}l{level}: &l{level} [{aliases}]\n"));
            }
            if u.arbitrary()? {
                text.push_str(&format!("{indent}last: *l{}\n", levels - 1));
            }
            text
        }
        // Repetition: many keys, or one long list.
        _ => {
            let n = u.int_in_range(1..=5_000)?;
            if u.arbitrary()? {
                let mut text = String::from("\n");
                for i in 0..n {
                    text.push_str(&format!("{indent}k{i}: v\n"));
                }
                text
            } else {
                format!(" [{}]\n", vec!["v"; n].join(", "))
            }
        }
    };
    let yaml = format!("{head}{value}");
    let size = yaml.len();
    let result = on_a_small_stack(move || {
        Layer::parse(1, "hostile", &yaml).map(|layer| {
            // What the layer holds, in strings: what aliases could have multiplied.
            let services: usize = layer
                .services
                .values()
                .map(|s| s.environment.len() + s.after.len() + s.rlimits.len())
                .sum();
            let checks: usize = layer
                .checks
                .values()
                .map(|c| c.http.as_ref().map_or(0, |h| h.headers.len()))
                .sum();
            services + checks
        })
    });
    match result {
        Ok(held) => {
            assert!(!past_limit, "nesting past {LIMIT} was accepted");
            // yaml.v3 lets aliases make 99 % of the decodes: a hundred times the text at most.
            assert!(held <= 100 * size + 1000, "{held} values from {size} bytes");
        }
        Err(error) => {
            let message = error.to_string();
            if past_limit {
                assert!(
                    message.ends_with("exceeded max depth of 10000"),
                    "nesting past the limit refused otherwise: {message}"
                );
            } else {
                assert!(
                    !message.contains("exceeded max depth"),
                    "nesting within the limit refused for its depth: {message}"
                );
            }
        }
    }
    Ok(())
}
