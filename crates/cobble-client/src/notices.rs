//! Notices: record custom ones, list, fetch and long-poll for them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::Client;
use crate::error::Error;
use crate::types::{AddNoticeRequest, AddedNotice, NoticeInfo};

/// Which notices [`Client::notices`] and [`Client::wait_notices`] return. The default is the
/// requester's own notices and the public ones, of any type and key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NoticesOptions {
    /// Every user's notices (`users=all`, admins only).
    pub all_users: bool,
    /// Only this user's notices and the public ones (`user-id`, admins only).
    pub user_id: Option<u32>,
    /// Only these types (`custom`, `change-update`, `warning`).
    pub types: Vec<String>,
    /// Only these keys.
    pub keys: Vec<String>,
    /// Only notices repeated strictly after this RFC 3339 time.
    pub after: Option<String>,
}

impl NoticesOptions {
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut query = Vec::new();
        if self.all_users {
            query.push(("users", "all".to_string()));
        }
        if let Some(uid) = self.user_id {
            query.push(("user-id", uid.to_string()));
        }
        query.extend(self.types.iter().map(|t| ("types", t.clone())));
        query.extend(self.keys.iter().map(|k| ("keys", k.clone())));
        if let Some(after) = &self.after {
            query.push(("after", after.clone()));
        }
        query
    }
}

/// A custom notice to record with [`Client::notify`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NotifyOptions {
    /// A `domain.com/path` key.
    pub key: String,
    /// The occurrence's data.
    pub data: BTreeMap<String, String>,
    /// Do not repeat the notice if it last repeated less than this long ago.
    pub repeat_after: Option<Duration>,
}

impl Client {
    /// `POST /v1/notices`: records an occurrence of a custom notice owned by the caller's
    /// uid; returns the notice's ID.
    pub async fn notify(&self, options: &NotifyOptions) -> Result<String, Error> {
        let body = AddNoticeRequest {
            action: "add".into(),
            kind: "custom".into(),
            key: options.key.clone(),
            repeat_after: options
                .repeat_after
                .map(|d| format!("{:.3}s", d.as_secs_f64()))
                .unwrap_or_default(),
            data: (!options.data.is_empty())
                .then(|| serde_json::to_value(&options.data).expect("string maps serialise")),
        };
        let added: AddedNotice = self.post("/v1/notices", &body).await?;
        Ok(added.id)
    }

    /// `GET /v1/notices`: the matching notices, ordered by last-repeated time.
    pub async fn notices(&self, options: &NoticesOptions) -> Result<Vec<NoticeInfo>, Error> {
        let query = options.query();
        let pairs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.get("/v1/notices", &pairs).await
    }

    /// `GET /v1/notices` with `timeout`: returns the matching notices as soon as there are
    /// any, or an empty list once `timeout` has passed without one.
    pub async fn wait_notices(
        &self,
        options: &NoticesOptions,
        timeout: Duration,
    ) -> Result<Vec<NoticeInfo>, Error> {
        let mut query = options.query();
        // Never zero: the daemon reads a zero timeout as "do not wait".
        let timeout = timeout.max(Duration::from_millis(1));
        query.push(("timeout", format!("{:.3}s", timeout.as_secs_f64())));
        let pairs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.get("/v1/notices", &pairs).await
    }

    /// `GET /v1/notices/{id}`.
    pub async fn notice(&self, id: &str) -> Result<NoticeInfo, Error> {
        self.get(&format!("/v1/notices/{}", crate::client::escape(id)), &[])
            .await
    }
}
