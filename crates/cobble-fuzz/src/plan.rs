//! Targets for the configuration model: Go durations, the layer parser, the plan merge.

use arbitrary::{Arbitrary, Unstructured};
use cobble_plan::{Layer, Plan, Schedule, format_duration, parse_duration};
use serde_json::{Map, Value, json};

/// Go durations: whatever parses formats back to text that parses to the same value, errors
/// carry Go's prefix, and text built from whole numbers and units parses to their exact sum
/// (or is refused exactly when the sum leaves Go's 64-bit range).
pub fn duration(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    if u.arbitrary()? {
        let text: &str = u.arbitrary()?;
        check_duration_text(text);
        return Ok(());
    }
    // Built text: an optional sign, then number-unit pairs.
    const UNITS: &[(&str, i128)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let sign = *u.choose(&["", "+", "-"])?;
    let mut text = sign.to_owned();
    let mut total: i128 = 0;
    let parts = u.int_in_range(1..=6)?;
    for _ in 0..parts {
        let n: u64 = if u.arbitrary()? {
            u.int_in_range(0..=1_000_000)?
        } else {
            u.arbitrary()?
        };
        let (unit, scale) = *u.choose(UNITS)?;
        let zeros = "0".repeat(u.int_in_range(0..=2)?);
        text.push_str(&format!("{zeros}{n}{unit}"));
        total = total.saturating_add(i128::from(n).saturating_mul(scale));
    }
    let parsed = parse_duration(&text);
    let limit = if sign == "-" {
        1i128 << 63
    } else {
        (1i128 << 63) - 1
    };
    if total > limit {
        assert!(
            parsed.is_err(),
            "{text:?} is out of range but parsed as {parsed:?}"
        );
    } else {
        let expected = if sign == "-" { -total } else { total };
        assert_eq!(parsed.map(i128::from), Ok(expected), "{text:?}");
    }
    check_duration_text(&text);
    Ok(())
}

/// Schedules: any text is parsed or refused without panicking, within its bounds; for a
/// parsed one, the next run after any time is strictly after it, its window does not close
/// before it opens, and from any time between the two the next run is the same.
pub fn schedule(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let text = if u.arbitrary()? {
        gen_schedule_text(u)?
    } else {
        <&str>::arbitrary(u)?.to_owned()
    };
    let Ok(schedule) = Schedule::parse(&text) else {
        return Ok(());
    };
    assert!(text.len() <= cobble_plan::schedule::MAX_LEN, "{text:?}");
    let year = u.int_in_range(1970..=2100i16)?;
    let month = u.int_in_range(1..=12i8)?;
    let day = u.int_in_range(1..=28i8)?;
    let after = jiff::civil::date(year, month, day).at(
        u.int_in_range(0..=23)?,
        u.int_in_range(0..=59)?,
        u.int_in_range(0..=59)?,
        0,
    );
    let next = schedule
        .next_after(after)
        .unwrap_or_else(|| panic!("{text:?} has no run after {after}"));
    assert!(next.start > after, "{text:?} after {after}: {next:?}");
    assert!(next.end >= next.start, "{text:?}: {next:?}");
    let jitter: u64 = u.arbitrary()?;
    let at = next.at(jitter);
    assert!(
        at >= next.start && (at < next.end || at == next.start),
        "{text:?}: {at}"
    );
    let gap = next.start.duration_since(after).as_secs();
    let between = after
        .checked_add(jiff::SignedDuration::from_secs(
            u.int_in_range(0..=gap - 1)?,
        ))
        .expect("between two valid times");
    assert_eq!(
        schedule.next_after(between),
        Some(next),
        "{text:?} from {between}"
    );
    Ok(())
}

/// Schedule text from the format's pieces, mostly valid, sometimes not.
fn gen_schedule_text(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    const DAYS: &[&str] = &[
        "mon", "tue", "wed", "thu", "fri", "sat", "sun", "mon1", "tue2", "wed3", "thu4", "fri5",
        "sun5", "mon6", "xyz",
    ];
    let mut sets = Vec::new();
    for _ in 0..u.int_in_range(1..=3)? {
        let mut fragments = Vec::new();
        for _ in 0..u.int_in_range(0..=2)? {
            let day = *u.choose(DAYS)?;
            if u.ratio(1, 3)? {
                fragments.push(format!("{day}-{}", u.choose(DAYS)?));
            } else {
                fragments.push(day.to_owned());
            }
        }
        for _ in 0..u.int_in_range(0..=2)? {
            let clock = |u: &mut Unstructured<'_>| -> arbitrary::Result<String> {
                Ok(format!(
                    "{}:{:02}",
                    u.int_in_range(0..=25)?,
                    u.int_in_range(0..=60)?
                ))
            };
            let mut time = clock(u)?;
            if u.arbitrary()? {
                time.push(*u.choose(&['-', '~'])?);
                time.push_str(&clock(u)?);
                if u.arbitrary()? {
                    time.push_str(&format!("/{}", u.int_in_range(0..=1500)?));
                }
            }
            fragments.push(time);
        }
        if fragments.is_empty() {
            fragments.push("mon".into());
        }
        sets.push(fragments.join(","));
    }
    Ok(sets.join(",,"))
}

fn check_duration_text(text: &str) {
    match parse_duration(text) {
        Ok(nanos) => {
            let formatted = format_duration(nanos);
            assert_eq!(
                parse_duration(&formatted),
                Ok(nanos),
                "{text:?} parsed as {nanos}, printed as {formatted:?}"
            );
        }
        Err(e) => assert!(e.to_string().starts_with("time: "), "{e}"),
    }
}

/// The layer parser on arbitrary text: never panics, and a layer that makes a valid plan
/// prints (as `GET /v1/plan?format=yaml` does) to YAML that parses back to the same plan.
pub fn layer(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let text = if u.arbitrary()? {
        String::from_utf8_lossy(u.bytes(u.len())?).into_owned()
    } else {
        <&str>::arbitrary_take_rest(std::mem::replace(u, Unstructured::new(&[])))?.to_owned()
    };
    check_layer_text(&text);
    Ok(())
}

/// The layer parser on layers built from the schema (as JSON, which is YAML too, compact or
/// indented), with the same round-trip property as [`layer`].
pub fn layer_structured(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let doc = gen_layer(u)?;
    let text = if u.arbitrary()? {
        serde_json::to_string_pretty(&doc)
    } else {
        serde_json::to_string(&doc)
    }
    .expect("JSON values serialise");
    check_layer_text(&text);
    Ok(())
}

fn check_layer_text(text: &str) {
    let Ok(layer) = Layer::parse(1, "fuzz", text) else {
        return;
    };
    let Ok(plan) = Plan::from_layers(vec![layer.clone()]) else {
        return;
    };
    check_layer_round_trip(&layer, text);
    check_plan_round_trip(&plan, text);
}

/// The printed layer of a valid plan reads back as the very same layer (what a re-execution
/// hands over).
fn check_layer_round_trip(layer: &Layer, source: &str) {
    let yaml = layer.to_yaml();
    match Layer::parse(layer.order, &layer.label, &yaml) {
        Ok(again) => assert!(
            again == *layer,
            "printed layer reads back as another\n--- source\n{source}\n--- printed\n{yaml}\n\
             --- layer\n{layer:?}\n--- read back\n{again:?}"
        ),
        Err(e) => {
            panic!("printed layer does not parse: {e}\n--- source\n{source}\n--- printed\n{yaml}")
        }
    }
}

/// The printed plan, parsed as a layer, is the same plan; and prints the same again.
fn check_plan_round_trip(plan: &Plan, source: &str) {
    let yaml = plan.to_yaml();
    let reparsed = Layer::parse(1, "fuzz", &yaml).unwrap_or_else(|e| {
        panic!("printed plan does not parse: {e}\n--- source\n{source}\n--- printed\n{yaml}")
    });
    let replanned = Plan::from_layers(vec![reparsed]).unwrap_or_else(|e| {
        panic!("printed plan is not valid: {e}\n--- source\n{source}\n--- printed\n{yaml}")
    });
    // An unset threshold is printed as the default it means, so it reads back set.
    let effective = |plan: &Plan| {
        let mut checks = plan.checks.clone();
        for check in checks.values_mut() {
            if check.threshold == 0 {
                check.threshold = cobble_plan::DEFAULT_CHECK_THRESHOLD;
            }
        }
        checks
    };
    assert_eq!(
        (
            &replanned.services,
            effective(&replanned),
            &replanned.log_targets
        ),
        (&plan.services, effective(plan), &plan.log_targets),
        "printed plan reads back differently\n--- source\n{source}\n--- printed\n{yaml}"
    );
    assert_eq!(replanned.to_yaml(), yaml, "printing is not stable");
}

/// The plan merge: combining layers is associative (`(a+b)+c`, `a+(b+c)` and `a+b+c` agree,
/// which is what lets `POST /v1/layers` with `combine` fold a layer into an existing one),
/// and a valid combined plan prints back to itself.
pub fn plan_merge(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let mut layers = Vec::new();
    for (order, label) in [(1, "a"), (2, "b"), (3, "c")] {
        let text = serde_json::to_string(&gen_layer(u)?).expect("JSON values serialise");
        match Layer::parse(order, label, &text) {
            Ok(layer) => layers.push(layer),
            Err(_) => return Ok(()),
        }
    }
    let [a, b, c] = [&layers[0], &layers[1], &layers[2]].map(Clone::clone);
    let flat = Layer::combine(&[a.clone(), b.clone(), c.clone()]);
    let left =
        Layer::combine(&[a.clone(), b.clone()]).and_then(|ab| Layer::combine(&[ab, c.clone()]));
    let right = Layer::combine(&[b, c]).and_then(|bc| Layer::combine(&[a, bc]));
    let entries = |l: &Layer| (l.services.clone(), l.checks.clone(), l.log_targets.clone());
    match (&flat, &left, &right) {
        (Ok(flat), Ok(left), Ok(right)) => {
            assert_eq!(entries(left), entries(flat), "(a+b)+c differs from a+b+c");
            assert_eq!(entries(right), entries(flat), "a+(b+c) differs from a+b+c");
        }
        (Err(_), Err(_), Err(_)) => {}
        _ => panic!("combining succeeds in one association only: {flat:?} {left:?} {right:?}"),
    }
    if let Ok(plan) = Plan::from_layers(layers) {
        for layer in &plan.layers {
            check_layer_round_trip(layer, "one of three generated layers");
        }
        check_plan_round_trip(&plan, "three generated layers");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Layer documents built from the schema. Values come mostly from small vocabularies of valid
// and borderline text (YAML's special scalars, quoting and indentation hazards), sometimes
// from the input itself.

const SERVICES: &[&str] = &["a", "b", "web-1", "x_y", "svc"];
const CHECKS: &[&str] = &["c1", "c2", "up"];
const TARGETS: &[&str] = &["t1", "t2"];
const WORKLOADS: &[&str] = &["app", "w-1"];
const OVERRIDES: &[&str] = &["merge", "replace", "merge", "replace", "bogus", ""];
const ACTIONS: &[&str] = &[
    "restart",
    "shutdown",
    "ignore",
    "success-shutdown",
    "failure-shutdown",
    "",
    "explode",
];
const DURATIONS: &[&str] = &[
    "0", "1s", "500ms", "1m30s", "-1s", "1h", "10us", "1.5s", "2µs", "0.001s", "1d", "",
];
const COMMANDS: &[&str] = &[
    "true",
    "sleep 1",
    "echo 'a b' \"c d\"",
    "sh -c 'exit 1'",
    "srv --port 1 [ --debug ]",
    "srv [ ]",
    "x \\[ y",
    "'unterminated",
    "[ a ]",
];
const TEXTS: &[&str] = &[
    "",
    "a",
    "hello world",
    "yes",
    "No",
    "on",
    "null",
    "~",
    "1",
    "1.5",
    "0x10",
    "0o17",
    "1e3",
    ".inf",
    "-.Inf",
    ".NaN",
    "True",
    "-",
    "- a",
    ": x",
    "a: b",
    "a #c",
    "#c",
    "'q'",
    "\"dq\"",
    "multi\nline",
    "trail\n",
    "two\n\n",
    " lead",
    "trail ",
    "tab\there",
    "é ü",
    "\u{1F600}",
    "[x]",
    "{y}",
    "*a",
    "&b",
    "!t",
    "%p",
    "@",
    "`",
    "|",
    ">",
    "\\",
    "\u{7f}",
    "\u{85}",
    "\u{a0}",
    "\u{2028}",
    "\u{feff}",
    "\r\n",
    "a\rb",
    "\0",
    "---",
    "...",
    "=",
    "<<",
];

fn maybe(u: &mut Unstructured<'_>) -> arbitrary::Result<bool> {
    u.ratio(1, 3)
}

fn text(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(1, 8)? {
        Ok(<&str>::arbitrary(u)?.to_owned())
    } else {
        Ok((*u.choose(TEXTS)?).to_owned())
    }
}

fn pick(u: &mut Unstructured<'_>, from: &[&str]) -> arbitrary::Result<Value> {
    Ok(Value::from(*u.choose(from)?))
}

fn pick_value(u: &mut Unstructured<'_>, from: &[Value]) -> arbitrary::Result<Value> {
    Ok(u.choose(from)?.clone())
}

fn names(u: &mut Unstructured<'_>, from: &[&str]) -> arbitrary::Result<Value> {
    let n = u.int_in_range(0..=3)?;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(pick(u, from)?);
    }
    Ok(Value::Array(out))
}

fn string_map(u: &mut Unstructured<'_>, keys: Option<&[&str]>) -> arbitrary::Result<Value> {
    let n = u.int_in_range(0..=3)?;
    let mut map = Map::new();
    for _ in 0..n {
        let key = match keys {
            Some(keys) => (*u.choose(keys)?).to_owned(),
            None => text(u)?,
        };
        let value = if u.ratio(1, 10)? {
            Value::Null
        } else {
            Value::from(text(u)?)
        };
        map.insert(key, value);
    }
    Ok(Value::Object(map))
}

/// Inserts `key` one time in three.
fn field(
    u: &mut Unstructured<'_>,
    map: &mut Map<String, Value>,
    key: &str,
    value: impl FnOnce(&mut Unstructured<'_>) -> arbitrary::Result<Value>,
) -> arbitrary::Result<()> {
    if maybe(u)? {
        let value = value(u)?;
        map.insert(key.to_owned(), value);
    }
    Ok(())
}

fn gen_service(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let mut s = Map::new();
    if !u.ratio(1, 20)? {
        s.insert("override".into(), pick(u, OVERRIDES)?);
    }
    if u.ratio(2, 3)? {
        s.insert("command".into(), pick(u, COMMANDS)?);
    }
    field(u, &mut s, "summary", |u| text(u).map(Value::from))?;
    field(u, &mut s, "description", |u| text(u).map(Value::from))?;
    field(u, &mut s, "startup", |u| {
        pick(u, &["enabled", "disabled", "", "maybe"])
    })?;
    field(u, &mut s, "after", |u| names(u, SERVICES))?;
    field(u, &mut s, "before", |u| names(u, SERVICES))?;
    field(u, &mut s, "requires", |u| names(u, SERVICES))?;
    field(u, &mut s, "workload", |u| pick(u, WORKLOADS))?;
    field(u, &mut s, "environment", |u| string_map(u, None))?;
    field(u, &mut s, "user-id", |u| {
        Ok(json!(u.int_in_range(0..=70000u32)?))
    })?;
    field(u, &mut s, "user", |u| {
        pick(u, &["root", "nobody", "no-such-user", ""])
    })?;
    field(u, &mut s, "group-id", |u| {
        Ok(json!(u.int_in_range(0..=70000u32)?))
    })?;
    field(u, &mut s, "group", |u| pick(u, &["root", "nogroup", ""]))?;
    field(u, &mut s, "working-dir", |u| {
        pick(u, &["/tmp", "/", "rel", ""])
    })?;
    field(u, &mut s, "on-success", |u| pick(u, ACTIONS))?;
    field(u, &mut s, "on-failure", |u| pick(u, ACTIONS))?;
    field(u, &mut s, "on-check-failure", |u| {
        let mut map = Map::new();
        for _ in 0..u.int_in_range(0..=2)? {
            map.insert((*u.choose(CHECKS)?).into(), pick(u, ACTIONS)?);
        }
        Ok(Value::Object(map))
    })?;
    field(u, &mut s, "backoff-delay", |u| pick(u, DURATIONS))?;
    field(u, &mut s, "backoff-factor", |u| {
        Ok(match u.int_in_range(0..=3)? {
            0 => json!(1.5),
            1 => json!(2),
            2 => json!("10"),
            _ => json!(0.5),
        })
    })?;
    field(u, &mut s, "backoff-limit", |u| pick(u, DURATIONS))?;
    field(u, &mut s, "kill-delay", |u| pick(u, DURATIONS))?;
    field(u, &mut s, "requires-paths", |u| {
        names(u, &["/tmp/x", "/etc", "rel", ""])
    })?;
    field(u, &mut s, "on-file-change", |u| {
        let mut map = Map::new();
        for _ in 0..u.int_in_range(0..=2)? {
            map.insert(
                (*u.choose(&["/tmp/x", "/etc/conf", "rel"])?).into(),
                pick(u, &["restart", "signal", "ignore", "bogus", ""])?,
            );
        }
        Ok(Value::Object(map))
    })?;
    field(u, &mut s, "persist-logs", |u| {
        pick_value(u, &[json!(true), json!(false), json!("yes"), Value::Null])
    })?;
    field(u, &mut s, "requires-checks", |u| names(u, CHECKS))?;
    field(u, &mut s, "start-grace", |u| pick(u, DURATIONS))?;
    field(u, &mut s, "type", |u| {
        pick(u, &["oneshot", "daemon", "", "simple", "Oneshot"])
    })?;
    field(u, &mut s, "readiness", |u| pick(u, &["notify", "", "sd"]))?;
    field(u, &mut s, "rlimits", |u| {
        let mut map = Map::new();
        for _ in 0..u.int_in_range(0..=2)? {
            map.insert(
                (*u.choose(&["nofile", "nproc", "core", "stack", "bogus"])?).into(),
                pick(
                    u,
                    &["1024", "1024:4096", "unlimited", "4096:1024", "-1", ""],
                )?,
            );
        }
        Ok(Value::Object(map))
    })?;
    field(u, &mut s, "resources", |u| {
        let mut map = Map::new();
        field(u, &mut map, "memory-max", |u| {
            pick(u, &["64M", "1.5G", "max", "0", "x"])
        })?;
        field(u, &mut map, "memory-high", |u| {
            pick(u, &["48Mi", "max", ""])
        })?;
        field(u, &mut map, "pids-max", |u| pick(u, &["100", "max", "-1"]))?;
        field(u, &mut map, "cpu-max", |u| {
            pick(u, &["50%", "0.5", "2", "max/100000", "50000/100000", "0"])
        })?;
        Ok(Value::Object(map))
    })?;
    field(u, &mut s, "sockets", |u| {
        let mut map = Map::new();
        for _ in 0..u.int_in_range(0..=2)? {
            let mut socket = Map::new();
            field(u, &mut socket, "listen", |u| {
                pick(
                    u,
                    &[
                        ":8080",
                        "127.0.0.1:9000",
                        "[::1]:80",
                        "/run/x.sock",
                        "rel",
                        "",
                    ],
                )
            })?;
            field(u, &mut socket, "backlog", |u| {
                Ok(json!(u.int_in_range(0..=5000u32)?))
            })?;
            field(u, &mut socket, "mode", |u| pick(u, &["0660", "0999", ""]))?;
            field(u, &mut socket, "user", |u| pick(u, &["root", "1000", ""]))?;
            field(u, &mut socket, "group", |u| pick(u, &["root", ""]))?;
            map.insert(
                (*u.choose(&["http", "admin"])?).into(),
                Value::Object(socket),
            );
        }
        Ok(Value::Object(map))
    })?;
    field(u, &mut s, "watchdog", |u| pick(u, DURATIONS))?;
    field(u, &mut s, "schedule", |u| {
        if u.ratio(1, 4)? {
            Ok(json!(gen_schedule_text(u)?))
        } else {
            pick(
                u,
                &[
                    "00:00-24:00/96",
                    "mon,10:00",
                    "mon-fri,9:00-17:00/8",
                    "fri5,23:00~01:00",
                    "10:00/2",
                    "mon6",
                    "",
                ],
            )
        }
    })?;
    Ok(Value::Object(s))
}

fn gen_workload(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let mut w = Map::new();
    if !u.ratio(1, 20)? {
        w.insert("override".into(), pick(u, OVERRIDES)?);
    }
    field(u, &mut w, "environment", |u| string_map(u, None))?;
    field(u, &mut w, "user-id", |u| {
        Ok(json!(u.int_in_range(0..=70000u32)?))
    })?;
    field(u, &mut w, "user", |u| pick(u, &["root", "nobody", ""]))?;
    field(u, &mut w, "group-id", |u| {
        Ok(json!(u.int_in_range(0..=70000u32)?))
    })?;
    field(u, &mut w, "group", |u| pick(u, &["root", ""]))?;
    Ok(Value::Object(w))
}

fn gen_check(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let mut c = Map::new();
    if !u.ratio(1, 20)? {
        c.insert("override".into(), pick(u, OVERRIDES)?);
    }
    field(u, &mut c, "level", |u| {
        pick(u, &["alive", "ready", "", "dead"])
    })?;
    field(u, &mut c, "startup", |u| {
        pick(u, &["enabled", "disabled", ""])
    })?;
    field(u, &mut c, "period", |u| pick(u, DURATIONS))?;
    field(u, &mut c, "timeout", |u| pick(u, DURATIONS))?;
    field(u, &mut c, "threshold", |u| {
        Ok(json!(u.int_in_range(0..=5u32)?))
    })?;
    let kind = u.int_in_range(0..=4)?;
    if kind == 0 || kind == 3 {
        let mut http = Map::new();
        http.insert(
            "url".into(),
            pick(u, &["http://localhost:8080/", "https://x/y?z=1", "", "::"])?,
        );
        field(u, &mut http, "headers", |u| string_map(u, None))?;
        c.insert("http".into(), Value::Object(http));
    }
    if kind == 1 || kind == 3 {
        let mut tcp = Map::new();
        field(u, &mut tcp, "port", |u| {
            Ok(json!(u.int_in_range(0..=70000u32)?))
        })?;
        field(u, &mut tcp, "host", |u| pick(u, &["localhost", "::1", ""]))?;
        c.insert("tcp".into(), Value::Object(tcp));
    }
    if kind == 2 {
        let mut exec = Map::new();
        field(u, &mut exec, "command", |u| pick(u, COMMANDS))?;
        field(u, &mut exec, "service-context", |u| pick(u, SERVICES))?;
        field(u, &mut exec, "environment", |u| string_map(u, None))?;
        field(u, &mut exec, "user-id", |u| {
            Ok(json!(u.int_in_range(0..=70000u32)?))
        })?;
        field(u, &mut exec, "user", |u| pick(u, &["root", "nobody", ""]))?;
        field(u, &mut exec, "group-id", |u| {
            Ok(json!(u.int_in_range(0..=70000u32)?))
        })?;
        field(u, &mut exec, "group", |u| pick(u, &["root", ""]))?;
        field(u, &mut exec, "working-dir", |u| pick(u, &["/tmp", ""]))?;
        c.insert("exec".into(), Value::Object(exec));
    }
    Ok(Value::Object(c))
}

fn gen_log_target(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let mut t = Map::new();
    if !u.ratio(1, 20)? {
        t.insert("override".into(), pick(u, OVERRIDES)?);
    }
    field(u, &mut t, "type", |u| {
        pick(u, &["loki", "opentelemetry", "syslog", ""])
    })?;
    field(u, &mut t, "location", |u| {
        pick(u, &["http://loki:3100/loki/api/v1/push", ""])
    })?;
    field(u, &mut t, "services", |u| {
        let mut all: Vec<&str> = SERVICES.to_vec();
        all.extend(["all", "-a", "-all"]);
        names(u, &all)
    })?;
    field(u, &mut t, "labels", |u| {
        string_map(u, Some(&["env", "pebble_x", "$x", "a b"]))
    })?;
    Ok(Value::Object(t))
}

fn section(
    u: &mut Unstructured<'_>,
    names: &[&str],
    entry: fn(&mut Unstructured<'_>) -> arbitrary::Result<Value>,
) -> arbitrary::Result<Value> {
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let name = *u.choose(names)?;
        let value = if u.ratio(1, 30)? {
            Value::Null
        } else {
            entry(u)?
        };
        map.insert(name.to_owned(), value);
    }
    Ok(Value::Object(map))
}

/// One layer document.
fn gen_layer(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    let mut doc = Map::new();
    field(u, &mut doc, "summary", |u| text(u).map(Value::from))?;
    field(u, &mut doc, "description", |u| text(u).map(Value::from))?;
    if u.ratio(3, 4)? {
        doc.insert("services".into(), section(u, SERVICES, gen_service)?);
    }
    if u.ratio(1, 2)? {
        doc.insert("checks".into(), section(u, CHECKS, gen_check)?);
    }
    if u.ratio(1, 4)? {
        doc.insert("log-targets".into(), section(u, TARGETS, gen_log_target)?);
    }
    if u.ratio(1, 4)? {
        doc.insert("workloads".into(), section(u, WORKLOADS, gen_workload)?);
    }
    Ok(Value::Object(doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A generator of one entry.
    type Entry = fn(&mut Unstructured<'_>) -> arbitrary::Result<Value>;

    /// The fields the generator gives an entry, over many inputs.
    fn generated_fields(entry: Entry) -> BTreeSet<String> {
        let mut fields = BTreeSet::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..500 {
            let bytes: Vec<u8> = (0..4096)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            let mut u = Unstructured::new(&bytes);
            if let Ok(Value::Object(map)) = entry(&mut u) {
                fields.extend(map.keys().cloned());
            }
        }
        fields
    }

    /// The generator writes every field the parser reads, and no other, so that a field
    /// added to the parser is fuzzed too.
    #[test]
    fn the_generator_writes_every_field_of_the_parser() {
        let generators: [(&str, Entry); 3] = [
            ("services", gen_service),
            ("checks", gen_check),
            ("log-targets", gen_log_target),
        ];
        assert_eq!(
            generators.map(|(section, _)| section),
            cobble_plan::fields::ENTRY_SECTIONS
        );
        for (section, entry) in generators {
            let parser: BTreeSet<String> = cobble_plan::fields::parser_fields(section)
                .iter()
                .map(|f| f.to_string())
                .collect();
            assert!(parser.len() >= 5, "{section}: {parser:?}");
            let generated = generated_fields(entry);
            let missing: Vec<_> = parser.difference(&generated).collect();
            let unknown: Vec<_> = generated.difference(&parser).collect();
            assert!(
                missing.is_empty() && unknown.is_empty(),
                "{section}: the generator in cobble-fuzz/src/plan.rs never writes {missing:?}, \
                 and writes {unknown:?} which the parser does not read"
            );
        }
    }
}
