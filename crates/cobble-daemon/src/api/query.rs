//! Query parameters as Go's `url.Values` reads them. Handlers extract the query as pairs in
//! the order the client sent them; a key may repeat, and a handler asks for its first value,
//! all of them, or all of them split on commas.

/// The first value of `key`, or `""` when it is absent (Go's `Values.Get`).
pub(super) fn first<'a>(query: &'a [(String, String)], key: &str) -> &'a str {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// Every value of `key`, in order (`path=/a&path=/b`).
pub(super) fn all(query: &[(String, String)], key: &str) -> Vec<String> {
    query
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Values of a repeatable, comma-separated parameter (`names=a,b&names=c`), trimmed, empty
/// ones dropped (Pebble's `strutil.MultiCommaSeparatedList`).
pub(super) fn multi_comma_list(query: &[(String, String)], key: &str) -> Vec<String> {
    query
        .iter()
        .filter(|(k, _)| k == key)
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(raw: &[(&str, &str)]) -> Vec<(String, String)> {
        raw.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn first_takes_the_first_of_repeated_keys() {
        let q = pairs(&[("a", "1"), ("b", ""), ("a", "2")]);
        assert_eq!(first(&q, "a"), "1");
        assert_eq!(first(&q, "b"), "");
        assert_eq!(first(&q, "c"), "");
    }

    #[test]
    fn all_keeps_order_and_empty_values() {
        let q = pairs(&[("p", "/b"), ("x", "1"), ("p", ""), ("p", "/a")]);
        assert_eq!(all(&q, "p"), ["/b", "", "/a"]);
        assert!(all(&q, "q").is_empty());
    }

    #[test]
    fn comma_lists_split_trim_and_drop_empties() {
        let q = pairs(&[("names", "a, b,,"), ("other", "x"), ("names", " c ")]);
        assert_eq!(multi_comma_list(&q, "names"), ["a", "b", "c"]);
    }
}
