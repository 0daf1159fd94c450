//! `/v1/checks` and `/v1/checks/refresh`: the checks listed, started, stopped or run at once.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::Response;
use cobble_client::types::{
    CheckInfo, ChecksAction, ChecksActionResult, RefreshCheckRequest, RefreshCheckResult,
};
use cobble_plan::CheckLevel;

use super::query::{first, multi_comma_list};
use super::{Admin, ApiError, Read, Shared, json_body, sync};
use crate::checks::{CheckAction, CheckManagerError, CheckView};
use crate::daemon_log::{self, SecurityEvent};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING, STRINGS};

/// The `level` query parameter: empty, `alive` or `ready`.
pub(super) fn level(query: &[(String, String)]) -> Result<CheckLevel, ApiError> {
    match first(query, "level") {
        "" => Ok(CheckLevel::Unset),
        "alive" => Ok(CheckLevel::Alive),
        "ready" => Ok(CheckLevel::Ready),
        _ => Err(ApiError::bad_request(r#"level must be "alive" or "ready""#)),
    }
}

/// The wire form of a check.
fn check_info(view: &CheckView) -> CheckInfo {
    CheckInfo {
        name: view.name.clone(),
        level: view.level.as_str().into(),
        startup: if view.startup_enabled {
            "enabled"
        } else {
            "disabled"
        }
        .into(),
        status: view.status.as_str().into(),
        successes: Some(view.successes),
        failures: u64::from(view.failures),
        threshold: u64::from(view.threshold),
        change_id: view.change_id.map(|id| id.to_string()).unwrap_or_default(),
        prev_change_id: view
            .prev_change_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
    }
}

pub(super) async fn get_checks(
    _: Read,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let level = level(&query)?;
    let names = multi_comma_list(&query, "names");
    let infos: Vec<CheckInfo> = api
        .checks
        .checks_shown()
        .await
        .iter()
        .filter(|c| level == CheckLevel::Unset || c.level == level)
        .filter(|c| names.is_empty() || names.contains(&c.name))
        .map(check_info)
        .collect();
    Ok(sync(infos))
}

impl GoPayload for ChecksAction {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[
            GoField::new("Action", "action", STRING),
            GoField::new("Checks", "checks", STRINGS),
        ],
    });
}

pub(super) async fn post_checks(
    admin: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ChecksAction = json_body(body, "cannot decode data from request body").await?;
    if request.checks.is_empty() {
        return Err(ApiError::bad_request(format!(
            "must specify checks for {} action",
            request.action
        )));
    }
    let Some(action) = CheckAction::from_name(&request.action) else {
        return Err(ApiError::invalid_action(&request.action));
    };
    if action == CheckAction::Stop {
        // Every named check is audited, whether or not it exists or is running.
        for check in &request.checks {
            daemon_log::security(SecurityEvent::MonitorDisabled {
                user: &admin.user,
                check,
            });
        }
    }
    let changed = api.checks.act(action, request.checks).await.map_err(|e| {
        let message = format!("cannot {action} checks: {e}");
        match e {
            CheckManagerError::NotFound(_) => ApiError::bad_request(message),
            _ => ApiError::internal(message),
        }
    })?;
    Ok(sync(ChecksActionResult { changed }))
}

impl GoPayload for RefreshCheckRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "",
        fields: &[GoField::new("Name", "name", STRING)],
    });
}

pub(super) async fn post_checks_refresh(
    _: Admin,
    State(api): State<Shared>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: RefreshCheckRequest =
        json_body(body, "cannot decode data from request body").await?;
    if request.name.is_empty() {
        return Err(ApiError::bad_request("must specify check name"));
    }
    if !api.plan.plan().checks.contains_key(&request.name) {
        return Err(ApiError::not_found(format!(
            "cannot find check with name \"{}\"",
            request.name
        )));
    }
    let (view, error) = api
        .checks
        .refresh(&request.name)
        .await
        .map_err(|e| match e {
            CheckManagerError::NoSuchCheck(_) => ApiError::not_found(e.to_string()),
            _ => ApiError::internal(e.to_string()),
        })?;
    Ok(sync(RefreshCheckResult {
        info: check_info(&view),
        error: error.map(|e| e.log_text()).unwrap_or_default(),
    }))
}
