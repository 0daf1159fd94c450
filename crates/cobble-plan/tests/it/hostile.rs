//! Layers a client can send to hurt a parser: nesting deeper than yaml.v3 takes, and aliases
//! that expand past what yaml.v3 expands. Each is refused in Pebble v1.32.1's words, at once,
//! on a small stack.

use cobble_plan::Layer;

/// Parses `yaml` as layer `hostile` on a thread with a small stack (the depth a layer asks
/// for must cost no recursion), and returns the error's text.
fn refusal(yaml: String) -> String {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || Layer::parse(1, "hostile", &yaml).map(drop))
        .expect("a thread")
        .join()
        .expect("no overflow")
        .expect_err("refused")
        .to_string()
}

/// Nine levels, each a flow sequence of nine aliases of the one before: 9^9 strings expanded.
fn billion_laughs(indent: &str) -> String {
    let mut yaml = format!(
        "{indent}a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n"
    );
    for (prev, level) in ('a'..='h').zip('b'..='i') {
        let aliases = vec![format!("*{prev}"); 9].join(", ");
        yaml.push_str(&format!("{indent}{level}: &{level} [{aliases}]\n"));
    }
    yaml
}

#[test]
fn a_billion_laughs_where_strings_belong_is_a_type_error_per_key() {
    // yaml.v3 refuses each sequence where a string belongs without looking inside it.
    let yaml = format!(
        "services:\n  bomb:\n    override: replace\n    command: sleep 1\n    environment:\n{}",
        billion_laughs("      ")
    );
    let lines: Vec<String> = (5..=13)
        .map(|line| format!("\n  line {line}: cannot unmarshal !!seq into string"))
        .collect();
    assert_eq!(
        refusal(yaml),
        format!(
            "cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:{}",
            lines.concat()
        )
    );
}

#[test]
fn a_billion_laughs_in_cobbles_own_fields_is_excessive_aliasing() {
    // A field Pebble does not have takes any YAML: every alias would be expanded.
    let yaml = format!(
        "services:\n  bomb:\n    override: replace\n    command: sleep 1\n    rlimits:\n{}",
        billion_laughs("      ")
    );
    assert_eq!(
        refusal(yaml),
        "cannot parse layer \"hostile\" section \"services\": yaml: document contains excessive aliasing"
    );
}

/// A service with 1000 environment entries, and `copies` services that are aliases of it.
fn aliased_services(copies: usize) -> String {
    let environment: Vec<String> = (0..1000).map(|i| format!("e{i}: v")).collect();
    let mut yaml = format!(
        "services:\n  base: &base\n    override: replace\n    command: sleep 1\n    environment: {{{}}}\n",
        environment.join(", ")
    );
    for i in 0..copies {
        yaml.push_str(&format!("  s{i}: *base\n"));
    }
    yaml
}

#[test]
fn aliases_are_expanded_as_far_as_yaml_v3_expands_them_and_no_further() {
    // yaml.v3 lets 99 % of a small document's decodes come from aliases: the 111th copy of
    // a service of 2000 nodes crosses that line (Pebble v1.32.1 takes 110 and refuses 111).
    let layer = Layer::parse(1, "aliases", &aliased_services(110)).expect("within yaml.v3's ratio");
    assert_eq!(layer.services.len(), 111);
    assert_eq!(layer.services["s109"].environment.len(), 1000);
    assert_eq!(
        refusal(aliased_services(111)),
        "cannot parse layer \"hostile\" section \"services\": yaml: document contains excessive aliasing"
    );
}

#[test]
fn nesting_deeper_than_yaml_v3_takes_is_refused_in_its_words() {
    let cases = [
        // Flow collections on the first line, which yaml.v3 does not name.
        (
            format!("summary: {}", "[".repeat(100_000)),
            "yaml: exceeded max depth of 10000",
        ),
        (
            format!("summary: {}", "{a: ".repeat(10_001)),
            "yaml: exceeded max depth of 10000",
        ),
        (
            format!("services:\n  web:\n    after: {}", "[".repeat(10_001)),
            "yaml: line 3: exceeded max depth of 10000",
        ),
        // Block sequences, each indented past the last.
        (
            format!("{}x\n", "- ".repeat(10_001)),
            "yaml: exceeded max depth of 10000",
        ),
    ];
    for (yaml, want) in cases {
        let head: String = yaml.chars().take(40).collect();
        assert_eq!(
            refusal(yaml),
            format!("cannot parse layer \"hostile\": {want}"),
            "{head}"
        );
    }
}

#[test]
fn nesting_yaml_v3_takes_is_read_and_refused_by_type() {
    let deep = |n: usize| format!("summary: {}{}\n", "[".repeat(n), "]".repeat(n));
    for depth in [300, 10_000] {
        assert_eq!(
            refusal(deep(depth)),
            "cannot parse layer \"hostile\" section \"summary\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into string",
            "{depth}"
        );
    }
    // As Pebble v1.32.1 answers: the 9997 sequences under three mappings are within the limit.
    let block = format!(
        "services:\n  s:\n    override: replace\n    command: x\n    environment:\n      {}x\n",
        "- ".repeat(9_997)
    );
    assert_eq!(
        refusal(block),
        "cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:\n  line 5: cannot unmarshal !!seq into map[string]string"
    );
}

/// A service whose `environment` (a mapping in Pebble's types) is given as `body`, after a
/// summary that is not ASCII, so that the parser's positions in characters and in bytes differ.
fn service_environment(body: &str) -> String {
    format!(
        "summary: \"é…ü\"\nservices:\n  web:\n    override: replace\n    command: x\n    environment: {body}\n"
    )
}

#[test]
fn a_layer_of_many_flow_mappings_is_read_in_one_pass() {
    // 200 000 flow mappings (1.6 MB): a reader that looked each one up from the start of the
    // text would take hours. Each answer is Pebble v1.32.1's to the same layer.
    let many = |n: usize| vec!["{a: 1}"; n].join(", ");
    assert_eq!(
        refusal(service_environment(&format!("[{}]", many(200_000)))),
        "cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:\n  line 4: cannot unmarshal !!seq into map[string]string"
    );
    // Its last bracket the wrong one: a syntax error found past all of them.
    assert_eq!(
        refusal(service_environment(&format!("[{}}}", many(100_000)))),
        "cannot parse layer \"hostile\": yaml: line 5: did not find expected ',' or ']'"
    );
    // Flow mappings each opened inside the last, far past yaml.v3's depth.
    let nested = format!("[{}]]", "{a: [1], ".repeat(50_000));
    assert_eq!(
        refusal(service_environment(&nested)),
        "cannot parse layer \"hostile\": yaml: line 6: exceeded max depth of 10000"
    );
}

#[test]
fn a_mapping_of_many_keys_is_checked_for_duplicates_in_one_pass() {
    // 100 000 different keys and a type error after them (1.4 MB): yaml.v3 compares every key
    // with every later one; cobble finds the same (none) without doing so. Pebble v1.32.1's
    // answer.
    let keys: String = (0..100_000).map(|i| format!("      K{i}: x\n")).collect();
    assert_eq!(
        refusal(service_environment(&format!("\n{keys}      Z: [1]"))),
        "cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:\n  line 100005: cannot unmarshal !!seq into string"
    );
    // One key 50 000 times: yaml.v3 would list 1.25 * 10^9 pairs; the list stops at 1000,
    // in yaml.v3's order and words.
    let same = "      A: x\n".repeat(50_000);
    let answer = refusal(service_environment(&format!("\n{same}")));
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:",
            "  line 6: mapping key \"A\" already defined at line 5",
            "  line 7: mapping key \"A\" already defined at line 5",
        ]
    );
    assert_eq!(lines.len(), 1 + 1000);
}

#[test]
fn an_unknown_anchor_after_text_that_is_not_ascii_is_named() {
    // As Pebble v1.32.1 answers.
    assert_eq!(
        refusal(service_environment("{A: *nope}")),
        "cannot parse layer \"hostile\": yaml: unknown anchor 'nope' referenced"
    );
}

/// A schedule is bounded before it is split: a megabyte of `,,` or of times is refused by
/// its length at once, and the most spans it may hold are refused past their number.
#[test]
fn a_huge_schedule_is_refused_by_its_bounds() {
    let layer = |schedule: &str| {
        format!(
            "services:\n  job:\n    override: replace\n    command: c\n    schedule: \"{schedule}\"\n"
        )
    };
    let huge = ",,".repeat(500_000);
    let error = refusal(layer(&huge));
    assert!(
        error.ends_with("invalid: longer than 512 bytes"),
        "{}",
        &error[error.len() - 60..]
    );
    let many = vec!["0:00"; 65].join(",");
    assert!(
        refusal(layer(&many)).ends_with("invalid: more than 64 days and times"),
        "{many}"
    );
    // Past u32, the count is refused as a count.
    assert!(
        refusal(layer("00:00-24:00/99999999999999999999")).ends_with("not a valid event count")
    );
}
