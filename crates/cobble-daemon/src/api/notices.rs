//! Notices: list (and long-poll), fetch one, and record custom ones.
//!
//! What a requester sees depends on its uid: its own notices and the public ones, or, for an
//! admin (root or the daemon's user) asking with `user-id` or `users=all`, another user's or
//! everyone's. A long-poll returns what already matches at once; otherwise it waits for a
//! notice to be added or repeated, and answers `[]` when its timeout passes.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use cobble_client::types::{AddNoticeRequest, AddedNotice, NoticeInfo};
use cobble_plan::duration::parse_duration;
use cobble_plan::go_quote;
use serde_json::Value;

use super::query::{first, multi_comma_list};
use super::{ApiError, Read, Shared, sync};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING};
use crate::identities::Access;
use crate::state::{Notice, NoticeFilter, NoticeType, Occurrence};

/// The longest key a custom notice may have, in bytes.
const MAX_KEY_LENGTH: usize = 256;
/// The most JSON a custom notice's `data` may take, in bytes.
const MAX_DATA_SIZE: usize = 4 * 1024;

/// The requester of a notices endpoint: the uid notices are visible to and owned by, and
/// whether it is an admin.
struct Requester {
    uid: u32,
    admin: bool,
}

/// The requester of a notices request, or Pebble's 403 when the request has no uid (a
/// caller over TCP, or one a basic or certificate identity named, even on the unix socket).
/// `what` is what the endpoint cannot then do: "retrieve notices", "retrieve notice",
/// "create notice".
async fn requester(parts: &mut Parts, api: &Shared, what: &str) -> Result<Requester, ApiError> {
    let caller = super::access::caller_of(parts, api).await;
    let uid = caller
        .as_ref()
        .and_then(|caller| caller.uid)
        .ok_or_else(|| forbidden(format!("cannot determine UID of request, so cannot {what}")))?;
    // Admin as the access rules decide it (an identity may grant or withhold it), not by
    // uid alone.
    let admin = caller.is_some_and(|caller| caller.access == Access::Admin);
    Ok(Requester { uid, admin })
}

/// The requester of `GET /v1/notices`.
pub(super) struct Lister(Requester);

/// The requester of `GET /v1/notices/{id}`.
pub(super) struct Reader(Requester);

/// The requester of `POST /v1/notices`.
pub(super) struct Creator(Requester);

impl FromRequestParts<Shared> for Lister {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        requester(parts, api, "retrieve notices").await.map(Lister)
    }
}

impl FromRequestParts<Shared> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        requester(parts, api, "retrieve notice").await.map(Reader)
    }
}

impl FromRequestParts<Shared> for Creator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, ApiError> {
        requester(parts, api, "create notice").await.map(Creator)
    }
}

fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message)
}

pub(super) async fn get_notices(
    _: Read,
    Lister(requester): Lister,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let Some(filter) = notice_filter(&requester, &query)? else {
        // Every type asked for is unknown: nothing can match, which is not an error (a newer
        // client may name types this daemon does not know).
        return Ok(sync(Vec::<NoticeInfo>::new()));
    };
    let raw_timeout = first(&query, "timeout");
    let timeout = if raw_timeout.is_empty() {
        0
    } else {
        parse_duration(raw_timeout)
            .map_err(|e| ApiError::bad_request(format!("invalid timeout: {e}")))?
    };
    let notices = if timeout == 0 {
        api.state.list_notices(&filter).await
    } else {
        // A negative timeout has already passed: what matches now, or nothing.
        let wait = Duration::from_nanos(timeout.max(0) as u64);
        // A daemon about to re-execute answers as the timeout would: nothing new yet, and
        // the client asks again (of the new program).
        tokio::select! {
            waited = tokio::time::timeout(wait, api.state.wait_notices(&filter)) => {
                waited.unwrap_or_default()
            }
            () = api.connections.drained() => Vec::new(),
        }
    };
    Ok(sync(render(&notices)))
}

fn render(notices: &[Notice]) -> Vec<NoticeInfo> {
    notices.iter().map(Notice::render).collect()
}

/// The filter of a `GET /v1/notices`, or `None` when it can match nothing.
fn notice_filter(
    requester: &Requester,
    query: &[(String, String)],
) -> Result<Option<NoticeFilter>, ApiError> {
    let has = |key: &str| query.iter().any(|(k, _)| k == key);
    let mut user_id = Some(requester.uid);
    if has("user-id") {
        if !requester.admin {
            return Err(forbidden(r#"only admins may use the "user-id" filter"#));
        }
        user_id = Some(
            user_id_filter(query)
                .map_err(|e| ApiError::bad_request(format!(r#"invalid "user-id" filter: {e}"#)))?,
        );
    }
    if has("users") {
        if !requester.admin {
            return Err(forbidden(r#"only admins may use the "users" filter"#));
        }
        if has("user-id") {
            return Err(ApiError::bad_request(
                r#"cannot use both "users" and "user-id" parameters"#,
            ));
        }
        if first(query, "users") != "all" {
            return Err(ApiError::bad_request(
                r#"invalid "users" filter: must be "all""#,
            ));
        }
        user_id = None;
    }
    let names = multi_comma_list(query, "types");
    let types: Vec<NoticeType> = names.iter().filter_map(|n| NoticeType::parse(n)).collect();
    if types.is_empty() && !names.is_empty() {
        return Ok(None);
    }
    let after = match first(query, "after") {
        "" => None,
        raw => Some(raw.parse::<jiff::Timestamp>().map_err(|_| {
            ApiError::bad_request(format!(
                r#"invalid "after" timestamp: parsing time {} as "2006-01-02T15:04:05Z07:00": cannot parse {} as "2006""#,
                go_quote(raw),
                go_quote(raw)
            ))
        })?),
    };
    Ok(Some(NoticeFilter {
        user_id,
        types,
        keys: multi_comma_list(query, "keys"),
        after,
    }))
}

/// The one uid of a `user-id` filter.
fn user_id_filter(query: &[(String, String)]) -> Result<u32, String> {
    let values = multi_comma_list(query, "user-id");
    let [value] = values.as_slice() else {
        return Err(r#"must only include one "user-id""#.into());
    };
    let n: i64 = value.parse().map_err(|_| {
        let reason = if value
            .trim_start_matches(['-', '+'])
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            "value out of range"
        } else {
            "invalid syntax"
        };
        format!("strconv.ParseInt: parsing {}: {reason}", go_quote(value))
    })?;
    u32::try_from(n).map_err(|_| format!("user ID is not a valid uint32: {n}"))
}

pub(super) async fn get_notice(
    _: Read,
    Reader(requester): Reader,
    State(api): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let notice = match id.parse::<u64>() {
        Ok(n) => api.state.get_notice(n).await,
        Err(_) => None,
    }
    .ok_or_else(|| ApiError::not_found(format!("cannot find notice with ID {}", go_quote(&id))))?;
    if !notice.visible_to(requester.uid, requester.admin) {
        return Err(forbidden(format!(
            "not allowed to access notice with id {}",
            go_quote(&id)
        )));
    }
    Ok(sync(notice.render()))
}

impl GoPayload for AddNoticeRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new("Type", "type", STRING),
            GoField::new("Key", "key", STRING),
            GoField::new("RepeatAfter", "repeat-after", STRING),
            GoField::new("DataJSON", "data", GoType::Raw),
        ],
    });
}

pub(super) async fn post_notices(
    _: Read,
    Creator(requester): Creator,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let raw = super::read_body(body, super::MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot decode request body: {e}")))?;
    let request: AddNoticeRequest = crate::go_json::decode(&raw)
        .map_err(|e| ApiError::bad_request(format!("cannot decode request body: {e}")))?;
    let occurrence = occurrence(requester.uid, &request)?;
    // The client is told the ID: it must survive a crash.
    let id = api
        .state
        .add_notice_recorded(occurrence)
        .await
        .map_err(|e| ApiError::internal(format!("cannot record notice: {e}")))?;
    Ok(sync(AddedNotice {
        id: id.get().to_string(),
    }))
}

/// Validates a request to add a notice, in Pebble's order and words.
fn occurrence(uid: u32, request: &AddNoticeRequest) -> Result<Occurrence, ApiError> {
    if request.action != "add" {
        return Err(ApiError::invalid_action(&request.action));
    }
    if request.kind != "custom" {
        return Err(ApiError::bad_request(format!(
            r#"invalid type {} (can only add "custom" notices)"#,
            go_quote(&request.kind)
        )));
    }
    if !valid_custom_key(&request.key) {
        return Err(ApiError::bad_request(format!(
            r#"invalid key {} (must be in "example.com/path" format)"#,
            go_quote(&request.key)
        )));
    }
    if request.key.len() > MAX_KEY_LENGTH {
        return Err(ApiError::bad_request(format!(
            "key must be {MAX_KEY_LENGTH} bytes or less"
        )));
    }
    let repeat_after = if request.repeat_after.is_empty() {
        0
    } else {
        parse_duration(&request.repeat_after)
            .map_err(|e| ApiError::bad_request(format!("invalid repeat-after: {e}")))?
    };
    // `json.RawMessage` keeps the value's text: its length is what was sent.
    let data = request.data.as_ref().and_then(Value::as_str);
    if data.map_or(0, str::len) > MAX_DATA_SIZE {
        return Err(ApiError::bad_request(format!(
            "total size of data must be {MAX_DATA_SIZE} bytes or less"
        )));
    }
    let data = string_map(data)
        .map_err(|e| ApiError::bad_request(format!("cannot decode notice data: {e}")))?;
    Ok(Occurrence {
        user_id: Some(uid),
        kind: NoticeType::Custom,
        key: request.key.clone(),
        data,
        // A negative repeat-after has always elapsed, like zero.
        repeat_after: Duration::from_nanos(repeat_after.max(0) as u64),
    })
}

/// Whether `key` has the `domain.com/path` shape custom keys need: lowercase alphanumeric
/// words joined by single dashes, at least two dot-separated labels, then one or more
/// slash-separated path segments.
fn valid_custom_key(key: &str) -> bool {
    fn word(s: &str) -> bool {
        !s.is_empty()
            && s.split('-').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            })
    }
    let mut segments = key.split('/');
    let domain = segments.next().unwrap_or_default();
    let path: Vec<&str> = segments.collect();
    let labels: Vec<&str> = domain.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| word(l))
        && !path.is_empty()
        && path.iter().all(|s| word(s))
}

/// Data as Go decodes the `json.RawMessage` it kept into `map[string]string`, with Go's
/// error words (a `null` value is an empty string, as in Go).
fn string_map(data: Option<&str>) -> Result<BTreeMap<String, String>, String> {
    const MAP: GoType = GoType::Map(&STRING);
    match data {
        None => Ok(BTreeMap::new()),
        Some(raw) => Ok(
            crate::go_json::decode_as::<Option<BTreeMap<String, String>>>(raw.as_bytes(), &MAP)?
                .unwrap_or_default(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_keys_follow_pebbles_pattern() {
        for good in ["a.com/b", "example.com/a/b-c", "x-1.y.z/p", "a.b/c/d/e"] {
            assert!(valid_custom_key(good), "{good}");
        }
        for bad in [
            "",
            "a.com",
            "acom/b",
            "A.com/b",
            "a.com/",
            "a..com/b",
            "-a.com/b",
            "a.com/b-",
            "a.com//b",
            "a.com/b_c",
            "a.com/b--c",
            ".a.com/b",
            "a.com/b/",
        ] {
            assert!(!valid_custom_key(bad), "{bad}");
        }
    }

    #[test]
    fn data_is_the_text_as_sent_and_decodes_as_go_decodes_a_string_map() {
        let data = |body: &str| {
            crate::go_json::decode::<AddNoticeRequest>(body.as_bytes())
                .unwrap()
                .data
                .and_then(|d| d.as_str().map(str::to_owned))
        };
        let body = r#"{"action": "add", "data": {"k": "v, \"}"}, "key": "a.com/b"}"#;
        assert_eq!(data(body).as_deref(), Some(r#"{"k": "v, \"}"}"#));
        assert_eq!(data(r#"{"data":null}"#).as_deref(), Some("null"));
        assert_eq!(
            data(r#"{"data":[1,[2]],"x":1}"#).as_deref(),
            Some("[1,[2]]")
        );
        assert_eq!(data(r#"{"key":"a.com/b"}"#), None);
        assert_eq!(
            data(r#"{"data":"x","DATA":"long"}"#).as_deref(),
            Some(r#""long""#),
            "the last wins, its key matched as Go matches it"
        );
        let map = string_map(Some(r#"{"a": "1", "b": null}"#)).unwrap();
        assert_eq!(map.get("b").map(String::as_str), Some(""));
        assert_eq!(string_map(Some("null")), Ok(BTreeMap::new()));
        assert_eq!(
            string_map(Some(r#"{"a": 1}"#)).unwrap_err(),
            "json: cannot unmarshal number into Go value of type string"
        );
        assert_eq!(
            string_map(Some("[1]")).unwrap_err(),
            "json: cannot unmarshal array into Go value of type map[string]string"
        );
        // Deep data within the size limit is a type error, as in Go, not a parser's limit.
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(2000), "]".repeat(2000));
        assert_eq!(
            string_map(Some(&deep)).unwrap_err(),
            "json: cannot unmarshal array into Go value of type string"
        );
    }

    #[test]
    fn user_id_filters() {
        let q = |v: &str| vec![("user-id".to_string(), v.to_string())];
        assert_eq!(user_id_filter(&q("1000")), Ok(1000));
        assert_eq!(
            user_id_filter(&q("1,2")).unwrap_err(),
            r#"must only include one "user-id""#
        );
        assert_eq!(
            user_id_filter(&q("-1")).unwrap_err(),
            "user ID is not a valid uint32: -1"
        );
        assert_eq!(
            user_id_filter(&q("x")).unwrap_err(),
            r#"strconv.ParseInt: parsing "x": invalid syntax"#
        );
    }
}
