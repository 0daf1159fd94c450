//! Label selectors: validation and matching as Kubernetes' `LabelSelectorAsSelector` does
//! them, with the same error texts, because one invalid selector in a namespace denies every
//! pod admission there and users read that message.
//!
//! `matchLabels` are checked in key order (Go walks its map in random order, so which of
//! several bad labels it names first is luck).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::aggregate::GoError;

/// A validated selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// Empty for an empty selector, which matches everything.
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Validates a selector. The error is the text Kubernetes' Go code gives.
    pub fn parse(selector: &LabelSelector) -> Result<Selector, String> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            // matchLabels become "=" requirements: exactly one value, so only key and value
            // can be wrong.
            requirements.push(requirement(key, Operator::In, std::slice::from_ref(value))?);
        }
        for expression in selector.match_expressions.iter().flatten() {
            let LabelSelectorRequirement {
                key,
                operator,
                values,
            } = expression;
            let operator = match operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            requirements.push(requirement(
                key,
                operator,
                values.as_deref().unwrap_or_default(),
            )?);
        }
        Ok(Selector { requirements })
    }

    /// Whether a pod with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match r.operator {
                Operator::In => value.is_some_and(|v| r.values.contains(v)),
                Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                Operator::Exists => value.is_some(),
                Operator::DoesNotExist => value.is_none(),
            }
        })
    }
}

/// Go's `labels.NewRequirement` without a field path: every problem is collected, then
/// rendered as a field error list.
fn requirement(key: &str, operator: Operator, values: &[String]) -> Result<Requirement, String> {
    let mut errors = Vec::new();
    let key_problems = qualified_name_problems(key);
    if !key_problems.is_empty() {
        errors.push(GoError::Message(format!(
            "key: Invalid value: {key:?}: {}",
            key_problems.join("; ")
        )));
    }
    let count_problem = match operator {
        Operator::In | Operator::NotIn if values.is_empty() => {
            Some("for 'in', 'notin' operators, values set can't be empty")
        }
        Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
            Some("values set must be empty for exists and does not exist")
        }
        _ => None,
    };
    if let Some(problem) = count_problem {
        errors.push(GoError::Message(format!(
            "values: Invalid value: {}: {problem}",
            go_string_slice(values)
        )));
    }
    for (i, value) in values.iter().enumerate() {
        let problems = label_value_problems(value);
        if !problems.is_empty() {
            errors.push(GoError::Message(format!(
                "values[{i}][{key}]: Invalid value: {value:?}: {}",
                problems.join("; ")
            )));
        }
    }
    match GoError::aggregate(errors) {
        Some(error) => Err(error.to_string()),
        None => Ok(Requirement {
            key: key.to_owned(),
            operator,
            values: values.to_vec(),
        }),
    }
}

/// `%#v` of a Go `[]string` that came from `append([]string(nil), values...)`.
fn go_string_slice(values: &[String]) -> String {
    if values.is_empty() {
        return "[]string(nil)".into();
    }
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `%v` of a Go `metav1.LabelSelector` value, as the Go webhook puts it in its deny text.
pub fn go_format(selector: &LabelSelector) -> String {
    let labels: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    let expressions: Vec<String> = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            let values = e.values.as_deref().unwrap_or_default().join(" ");
            format!("{{{} {} [{values}]}}", e.key, e.operator)
        })
        .collect();
    format!("{{map[{}] [{}]}}", labels.join(" "), expressions.join(" "))
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Go's `validation.RegexError`.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{format}')",
        examples.join(" or ")
    )
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let bytes = label.as_bytes();
        let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
            return false;
        };
        let ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        ok(first) && ok(last) && bytes.iter().all(|b| ok(b) || *b == b'-')
    })
}

/// Go's `validation.IsQualifiedName`.
fn qualified_name_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    problems.push("prefix part must be no more than 253 characters".to_owned());
                }
                if !is_dns1123_subdomain(prefix) {
                    problems.push(format!(
                        "prefix part {}",
                        regex_error(
                            DNS1123_SUBDOMAIN_MSG,
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"]
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            problems.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return problems;
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        problems.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    problems
}

/// Go's `validation.IsValidLabelValue`.
fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        problems.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(value: serde_json::Value) -> LabelSelector {
        serde_json::from_value(value).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matching_table() {
        let pod = labels(&[("app", "nb"), ("tier", "gpu"), ("kubeflow.org/x", "true")]);
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"app": "nb"}}), true),
            (json!({"matchLabels": {"app": "nb", "tier": "cpu"}}), false),
            (json!({"matchLabels": {"kubeflow.org/x": "true"}}), true),
            (json!({"matchLabels": {"missing": ""}}), false),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "tpu"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}),
                false,
            ),
            (
                json!({"matchLabels": {"app": "nb"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["cpu"]}]}),
                false,
            ),
        ];
        for (sel, want) in cases {
            let parsed = Selector::parse(&selector(sel.clone())).unwrap();
            assert_eq!(parsed.matches(&pod), want, "{sel}");
        }
        assert!(
            Selector::parse(&selector(json!({})))
                .unwrap()
                .matches(&BTreeMap::new())
        );
    }

    #[test]
    fn invalid_selectors_give_kubernetes_texts() {
        let cases = [
            (
                json!({"matchExpressions": [{"key": "k", "operator": "In"}]}),
                "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty",
            ),
            (
                json!({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["a"]}]}),
                "values: Invalid value: []string{\"a\"}: values set must be empty for exists and does not exist",
            ),
            (
                json!({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}),
                "\"Gt\" is not a valid label selector operator",
            ),
            (
                json!({"matchLabels": {"bad key": "v"}}),
                "key: Invalid value: \"bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            (
                json!({"matchLabels": {"k": "-v"}}),
                "values[0][k]: Invalid value: \"-v\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
            (
                json!({"matchLabels": {"Example.com/k": "v"}}),
                "key: Invalid value: \"Example.com/k\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ),
            (
                json!({"matchLabels": {"/k": "v"}}),
                "key: Invalid value: \"/k\": prefix part must be non-empty",
            ),
        ];
        for (sel, want) in cases {
            let err = Selector::parse(&selector(sel.clone())).unwrap_err();
            assert_eq!(err, want, "{sel}");
        }
        // Several problems in one requirement come as a list.
        let err = Selector::parse(&selector(
            json!({"matchExpressions": [{"key": "a/b/c", "operator": "In"}]}),
        ))
        .unwrap_err();
        assert!(
            err.starts_with("[key: Invalid value: \"a/b/c\": a qualified name must"),
            "{err}"
        );
        assert!(err.ends_with(", values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty]"), "{err}");
    }

    #[test]
    fn go_format_of_a_selector() {
        let sel = selector(json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "k", "operator": "In"}, {"key": "z", "operator": "NotIn", "values": ["x", "y"]}]
        }));
        assert_eq!(
            go_format(&sel),
            "{map[a:1 b:2] [{k In []} {z NotIn [x y]}]}"
        );
        assert_eq!(go_format(&LabelSelector::default()), "{map[] []}");
    }
}
