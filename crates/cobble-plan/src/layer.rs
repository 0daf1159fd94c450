//! Layers: parsing one YAML document into a validated [`Layer`].
//!
//! Decoding goes through private `*Doc` structs that mirror the YAML exactly (kebab-case keys,
//! unknown keys rejected, enum-like fields kept as text). Converting a doc into the public
//! types is where Pebble's per-layer validation happens, so each invalid value is reported
//! with Pebble's message and the entry's name rather than as a generic type error.
//!
//! Adding a field: the steps are in `docs/architecture.md` ("Where to change what"); the
//! parser's field lists, which the other lists are tested against, are read from the `*Doc`
//! structs here (`entry_fields`).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::check::{CheckLevel, ExecCheck, HttpCheck, LOG_TARGET_TYPES, TcpCheck};
use crate::duration::{GoDuration, go_quote};
use crate::error::PlanError;
use crate::limits::{Resources, Rlimit, RlimitValue, Rlimits};
use crate::service::{
    FileChangeAction, Override, Readiness, ServiceAction, ServiceType, Startup, split_command,
};
use crate::shell::shell_split;
use crate::simple_yaml;
use crate::sockets::{HeldSocket, ListenAddress};
use crate::workload::{PairingMode, Workload};
use crate::{Check, LogTarget, Service};

/// One configuration layer: a file in the layers directory or a document added over the API.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layer {
    /// Position among layers; later layers override earlier ones. Files get `1000 * NNN`
    /// (plus `MMM` inside `NNN-label.d/`), API layers get the next free thousand.
    pub order: u64,
    /// Unique name: the file name without order and suffix, `dir/file` for sub-directories.
    pub label: String,
    /// One-line summary (accepted, never shown in the plan).
    pub summary: String,
    /// Description (accepted, never shown in the plan).
    pub description: String,
    /// Services defined or overridden by this layer.
    pub services: BTreeMap<String, Service>,
    /// Checks defined or overridden by this layer.
    pub checks: BTreeMap<String, Check>,
    /// Log targets defined or overridden by this layer.
    pub log_targets: BTreeMap<String, LogTarget>,
    /// Workloads defined or overridden by this layer.
    pub workloads: BTreeMap<String, Workload>,
    /// `pairing: mode:`, if this layer sets it.
    pub pairing: PairingMode,
}

impl Layer {
    /// Parses and validates one layer document.
    ///
    /// Errors name the layer, and for YAML problems the section and line. `override` is not
    /// required here: its absence is reported when the layer is combined into a plan.
    pub fn parse(order: u64, label: &str, yaml: &str) -> Result<Layer, PlanError> {
        let doc = decode(label, yaml, Words::Pebble)?;
        // Pebble validates the label once the YAML is read, so a YAML error comes first.
        if label.starts_with("pebble-") {
            return Err(PlanError::ReservedLabelPrefix);
        }
        let mut layer = Layer {
            order,
            label: label.to_owned(),
            summary: doc.summary,
            description: doc.description,
            ..Layer::default()
        };
        for (name, service) in doc.services {
            let service = service_from_doc(&name, service)?;
            layer.services.insert(name, service);
        }
        for (name, check) in doc.checks {
            let check = check_from_doc(&name, check)?;
            layer.checks.insert(name, check);
        }
        for (name, target) in doc.log_targets {
            let target = log_target_from_doc(&name, target)?;
            layer.log_targets.insert(name, target);
        }
        // Pebble validates its extension sections after the built-in ones.
        for (name, workload) in doc.workloads {
            let workload = workload_from_doc(&name, workload)?;
            layer.workloads.insert(name, workload);
        }
        layer.pairing =
            PairingMode::parse(&doc.pairing.0).ok_or(PlanError::InvalidPairingMode {
                mode: doc.pairing.0,
            })?;
        Ok(layer)
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

#[derive(Debug, Default)]
struct LayerDoc {
    summary: String,
    description: String,
    services: BTreeMap<String, Option<ServiceDoc>>,
    checks: BTreeMap<String, Option<CheckDoc>>,
    log_targets: BTreeMap<String, Option<LogTargetDoc>>,
    workloads: BTreeMap<String, Option<WorkloadDoc>>,
    pairing: PairingDoc,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ServiceDoc {
    #[serde(default, deserialize_with = "nullable")]
    summary: String,
    #[serde(default, deserialize_with = "nullable")]
    description: String,
    #[serde(default, deserialize_with = "nullable")]
    startup: String,
    #[serde(default, rename = "override", deserialize_with = "nullable")]
    override_: String,
    #[serde(default, deserialize_with = "nullable")]
    command: String,
    #[serde(default, deserialize_with = "nullable")]
    after: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    before: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    requires: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    workload: String,
    #[serde(default, deserialize_with = "string_map")]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    user_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    user: String,
    #[serde(default)]
    group_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    group: String,
    #[serde(default, deserialize_with = "nullable")]
    working_dir: String,
    #[serde(default, deserialize_with = "nullable")]
    on_success: String,
    #[serde(default, deserialize_with = "nullable")]
    on_failure: String,
    #[serde(default, deserialize_with = "string_map")]
    on_check_failure: BTreeMap<String, String>,
    #[serde(default)]
    backoff_delay: Option<GoDuration>,
    #[serde(default)]
    backoff_factor: Option<GoFloat>,
    #[serde(default)]
    backoff_limit: Option<GoDuration>,
    #[serde(default)]
    kill_delay: Option<GoDuration>,
    #[serde(default, deserialize_with = "nullable")]
    requires_paths: Vec<String>,
    #[serde(default, deserialize_with = "string_map")]
    on_file_change: BTreeMap<String, String>,
    #[serde(default)]
    persist_logs: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    requires_checks: Vec<String>,
    #[serde(default)]
    start_grace: Option<GoDuration>,
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    type_: String,
    #[serde(default, deserialize_with = "nullable")]
    readiness: String,
    #[serde(default, deserialize_with = "string_map")]
    rlimits: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "nullable")]
    resources: ResourcesDoc,
    #[serde(default, deserialize_with = "nullable")]
    sockets: BTreeMap<String, Option<SocketDoc>>,
    #[serde(default)]
    watchdog: Option<GoDuration>,
    #[serde(default, deserialize_with = "nullable")]
    schedule: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SocketDoc {
    #[serde(default, deserialize_with = "nullable")]
    listen: String,
    #[serde(default)]
    backlog: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    mode: String,
    #[serde(default, deserialize_with = "nullable")]
    user: String,
    #[serde(default, deserialize_with = "nullable")]
    group: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ResourcesDoc {
    #[serde(default, deserialize_with = "nullable")]
    memory_max: String,
    #[serde(default, deserialize_with = "nullable")]
    memory_high: String,
    #[serde(default, deserialize_with = "nullable")]
    pids_max: String,
    #[serde(default, deserialize_with = "nullable")]
    cpu_max: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CheckDoc {
    #[serde(default, rename = "override", deserialize_with = "nullable")]
    override_: String,
    #[serde(default, deserialize_with = "nullable")]
    level: String,
    #[serde(default, deserialize_with = "nullable")]
    startup: String,
    #[serde(default)]
    period: Option<GoDuration>,
    #[serde(default)]
    timeout: Option<GoDuration>,
    #[serde(default)]
    threshold: Option<u32>,
    #[serde(default)]
    http: Option<HttpDoc>,
    #[serde(default)]
    tcp: Option<TcpDoc>,
    #[serde(default)]
    exec: Option<ExecDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct HttpDoc {
    #[serde(default, deserialize_with = "nullable")]
    url: String,
    #[serde(default, deserialize_with = "string_map")]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct TcpDoc {
    #[serde(default)]
    port: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    host: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ExecDoc {
    #[serde(default, deserialize_with = "nullable")]
    command: String,
    #[serde(default, deserialize_with = "nullable")]
    service_context: String,
    #[serde(default, deserialize_with = "string_map")]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    user_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    user: String,
    #[serde(default)]
    group_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    group: String,
    #[serde(default, deserialize_with = "nullable")]
    working_dir: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct LogTargetDoc {
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    type_: String,
    #[serde(default, deserialize_with = "nullable")]
    location: String,
    #[serde(default, deserialize_with = "nullable")]
    services: Vec<String>,
    #[serde(default, rename = "override", deserialize_with = "nullable")]
    override_: String,
    #[serde(default, deserialize_with = "string_map")]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct WorkloadDoc {
    #[serde(default, rename = "override", deserialize_with = "nullable")]
    override_: String,
    #[serde(default, deserialize_with = "string_map")]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    user_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    user: String,
    #[serde(default)]
    group_id: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    group: String,
}

/// `pairing:`, read as Pebble reads it: only a node with content is decoded, so null and
/// any scalar are an empty section; a mapping may hold `mode` alone; a sequence is an error.
/// Holds the mode as written (`""` when unset).
#[derive(Debug, Default)]
struct PairingDoc(String);

impl<'de> Deserialize<'de> for PairingDoc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            #[serde(default, deserialize_with = "nullable")]
            mode: String,
        }

        struct PairingVisitor;

        impl<'de> Visitor<'de> for PairingVisitor {
            type Value = PairingDoc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }

            fn visit_unit<E: de::Error>(self) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_none<E: de::Error>(self) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<PairingDoc, E> {
                Ok(PairingDoc::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PairingDoc, A::Error> {
                let fields = Fields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(PairingDoc(fields.mode))
            }
        }

        deserializer.deserialize_any(PairingVisitor)
    }
}

/// YAML `null` (or an empty value) decodes to the type's empty value, as in Go.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A string map whose null values become `""`. Scalars keep their source text, so
/// `PORT: 8080` is `"8080"` and `DEBUG: true` is `"true"`.
fn string_map<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    let map: Option<BTreeMap<String, Option<String>>> = Option::deserialize(deserializer)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.unwrap_or_default()))
        .collect())
}

/// A float read from any scalar's text, like Pebble's `backoff-factor`.
#[derive(Debug)]
struct GoFloat(f64);

impl<'de> Deserialize<'de> for GoFloat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FloatVisitor;

        impl Visitor<'_> for FloatVisitor {
            type Value = GoFloat;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a floating-point number")
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<GoFloat, E> {
                Ok(GoFloat(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoFloat, E> {
                Ok(GoFloat(v as f64))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoFloat, E> {
                Ok(GoFloat(v as f64))
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<GoFloat, E> {
                self.visit_str(&v.to_string())
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoFloat, E> {
                v.trim().parse().map(GoFloat).map_err(|_| {
                    E::custom(format!("invalid floating-point number {}", go_quote(v)))
                })
            }
        }

        deserializer.deserialize_any(FloatVisitor)
    }
}

/// Tracks where decoding is, so errors can name the section Pebble would name.
#[derive(Default)]
struct Progress {
    section: Cell<Option<&'static str>>,
    unknown_section: RefCell<Option<String>>,
}

struct LayerSeed<'a>(&'a Progress);

impl<'de> DeserializeSeed<'de> for LayerSeed<'_> {
    type Value = LayerDoc;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<LayerDoc, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for LayerSeed<'_> {
    type Value = LayerDoc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a layer mapping")
    }

    fn visit_none<E: de::Error>(self) -> Result<LayerDoc, E> {
        Ok(LayerDoc::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<LayerDoc, E> {
        Ok(LayerDoc::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<LayerDoc, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LayerDoc, A::Error> {
        let progress = self.0;
        let mut doc = LayerDoc::default();
        while let Some(key) = map.next_key::<String>()? {
            let section = match key.as_str() {
                "summary" => "summary",
                "description" => "description",
                "services" => "services",
                "checks" => "checks",
                "log-targets" => "log-targets",
                "workloads" => "workloads",
                "pairing" => "pairing",
                _ => {
                    progress.unknown_section.replace(Some(key));
                    return Err(de::Error::custom("unknown section"));
                }
            };
            progress.section.set(Some(section));
            match section {
                "summary" => doc.summary = map.next_value::<Nullable<String>>()?.0,
                "description" => doc.description = map.next_value::<Nullable<String>>()?.0,
                "services" => doc.services = map.next_value::<Nullable<_>>()?.0,
                "checks" => doc.checks = map.next_value::<Nullable<_>>()?.0,
                "log-targets" => doc.log_targets = map.next_value::<Nullable<_>>()?.0,
                "workloads" => doc.workloads = map.next_value::<Nullable<_>>()?.0,
                _ => doc.pairing = map.next_value()?,
            }
            progress.section.set(None);
        }
        Ok(doc)
    }
}

struct Nullable<T>(T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Nullable<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        nullable(deserializer).map(Nullable)
    }
}

/// How the YAML library reads layers. Its budget bounds what a layer may ask of it (depth,
/// nodes, alias replays); its own rule for aliases (more than ten per anchor) is off, since
/// yaml.v3's, which Pebble's layers are held to, is applied before it reads a layer with
/// aliases (`pebble_errors::aliasing_error`).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        with_snippet: false,
        null_as_string: false,
        budget: serde_saphyr::budget! {
            enforce_alias_anchor_ratio: false,
        },
    }
}

/// The fields a doc struct's derived reader accepts, in declaration order: serde hands them to
/// `deserialize_struct`, where this deserializer keeps them and stops.
fn doc_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a Cell<&'static [&'static str]>);

    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(fields);
            Err(de::Error::custom("fields read"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let fields = Cell::new(&[][..]);
    let _ = T::deserialize(Probe(&fields));
    fields.get()
}

/// The fields the parser accepts in an entry of `section` (`services`, `checks`,
/// `log-targets`), in the order it declares them; empty for any other name.
pub(crate) fn entry_fields(section: &str) -> &'static [&'static str] {
    match section {
        "services" => doc_fields::<ServiceDoc>(),
        "checks" => doc_fields::<CheckDoc>(),
        "log-targets" => doc_fields::<LogTargetDoc>(),
        _ => &[],
    }
}

/// Whose words a refused layer is reported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Words {
    /// Pebble's, wherever Pebble would have refused it too (see [`crate::pebble_errors`]).
    Pebble,
    /// cobble's own reader's, which list the fields it knows.
    Cobble,
}

impl Layer {
    /// Why cobble's own reader refuses `yaml`, in its words: an unknown field's refusal lists
    /// the fields known there. For the test that checks every field is documented.
    #[doc(hidden)]
    pub fn own_refusal(yaml: &str) -> Option<String> {
        decode("probe", yaml, Words::Cobble)
            .err()
            .map(|e| e.to_string())
    }
}

fn decode(label: &str, yaml: &str, words: Words) -> Result<LayerDoc, PlanError> {
    // A tab where yaml.v3 wants a token: the YAML library takes some of these.
    if words == Words::Pebble
        && let Some(message) = crate::pebble_errors::tab_error(yaml)
    {
        return Err(PlanError::Parse {
            label: label.to_owned(),
            section: None,
            line: None,
            message,
        });
    }
    // A section with no value, which Pebble refuses.
    if words == Words::Pebble
        && let Some(error) = crate::pebble_errors::empty_section(label, yaml)
    {
        return Err(error);
    }
    // Most layers are plain block YAML, which the quick reader takes at a fraction of the
    // cost; it declines anything else, and errors always come from the full parser.
    let quick = Progress::default();
    if let Some(doc) = simple_yaml::deserialize(yaml, LayerSeed(&quick), options) {
        return Ok(doc);
    }
    decode_fully(label, yaml, words)
}

/// [`decode`] with the full YAML library.
fn decode_fully(label: &str, yaml: &str, words: Words) -> Result<LayerDoc, PlanError> {
    // Aliases expand as the library reads them: what yaml.v3 would refuse to expand is
    // refused first, in its words, so that a small layer cannot ask for a huge plan.
    if yaml.contains('*')
        && let Some(error) = crate::pebble_errors::aliasing_error(label, yaml)
    {
        return Err(error);
    }
    let progress = Progress::default();
    let result = serde_saphyr::with_deserializer_from_str_with_options(yaml, options(), |de| {
        LayerSeed(&progress).deserialize(de)
    });
    if result.is_err()
        && words == Words::Pebble
        && let Some(end) = crate::pebble_errors::first_document_end(yaml)
    {
        // Pebble reads the first document alone.
        return decode(label, &yaml[..end], words);
    }
    result.map_err(|error| {
        // Where Pebble would have refused the layer too, its words.
        if words == Words::Pebble
            && let Some(error) = crate::pebble_errors::layer_error(label, yaml)
        {
            return error;
        }
        if let Some(section) = progress.unknown_section.take() {
            return PlanError::UnknownSection {
                label: label.to_owned(),
                section,
            };
        }
        let location = error.location();
        let mut message = error.to_string();
        if let Some(location) = location {
            // The library appends the position; we put the line first, Pebble-style.
            let suffix = format!(" at line {}, column {}", location.line(), location.column());
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_owned();
            }
        }
        let line = location.map(|l| l.line());
        let message = user_message(message);
        // The extension sections word their errors as Pebble's extensions do.
        match progress.section.get() {
            Some("workloads") => PlanError::ParseSection {
                section: "\"workloads\"",
                line,
                message,
            },
            Some("pairing") => PlanError::ParseSection {
                section: "pairing",
                line,
                message,
            },
            section => PlanError::Parse {
                label: label.to_owned(),
                section: section.map(str::to_owned),
                line,
                message,
            },
        }
    })
}

/// Rewords the YAML library's messages that speak to Rust developers rather than to users.
fn user_message(message: String) -> String {
    const DUPLICATE: &str = "duplicate mapping key: ";
    const HINT: &str = ", set DuplicateKeyPolicy in Options if acceptable";
    if let Some(key) = message
        .strip_prefix(DUPLICATE)
        .and_then(|rest| rest.strip_suffix(HINT))
    {
        return format!("mapping key {} already defined", go_quote(key));
    }
    message
}

// ---------------------------------------------------------------------------------------------
// Conversion and per-layer validation (Pebble's `Layer.Validate`)

fn service_from_doc(name: &str, doc: Option<ServiceDoc>) -> Result<Service, PlanError> {
    if name.is_empty() {
        return Err(PlanError::EmptyServiceName);
    }
    if name == "pebble" {
        return Err(PlanError::ReservedServiceName { name: name.into() });
    }
    if name.starts_with('-') {
        return Err(PlanError::ServiceNameStartsWithDash { name: name.into() });
    }
    let Some(doc) = doc else {
        return Err(PlanError::NullObject {
            kind: "service",
            name: name.into(),
        });
    };
    split_command(&doc.command).map_err(|error| PlanError::InvalidServiceCommand {
        service: name.into(),
        error,
    })?;
    let action = |field: &'static str, text: &str| {
        ServiceAction::parse_for(field, text).ok_or_else(|| PlanError::InvalidAction {
            service: name.into(),
            field,
            value: text.into(),
        })
    };
    let on_success = action("on-success", &doc.on_success)?;
    let on_failure = action("on-failure", &doc.on_failure)?;
    let mut on_check_failure = BTreeMap::new();
    for (check, text) in doc.on_check_failure {
        on_check_failure.insert(check, action("on-check-failure", &text)?);
    }
    let backoff_factor = doc.backoff_factor.map(|f| f.0);
    if let Some(value) = backoff_factor.filter(|f| *f < 1.0) {
        return Err(PlanError::BackoffFactorTooSmall {
            service: name.into(),
            value,
        });
    }
    // Pebble does not validate a service's startup: any text is kept (see `Startup::Other`).
    let startup = Startup::parse_lax(&doc.startup);
    let absolute = |field: &'static str, path: &str| {
        if path.starts_with('/') {
            Ok(())
        } else {
            Err(PlanError::RelativePath {
                service: name.into(),
                field,
                path: path.into(),
            })
        }
    };
    for path in &doc.requires_paths {
        absolute("requires-paths", path)?;
    }
    let type_ = ServiceType::parse(&doc.type_).ok_or_else(|| PlanError::InvalidServiceType {
        service: name.into(),
        value: doc.type_.clone(),
    })?;
    let readiness =
        Readiness::parse(&doc.readiness).ok_or_else(|| PlanError::InvalidReadiness {
            service: name.into(),
            value: doc.readiness.clone(),
        })?;
    if let Some(grace) = doc.start_grace.filter(|d| d.0 < 0) {
        return Err(PlanError::NegativeStartGrace {
            service: name.into(),
            value: grace,
        });
    }
    let mut rlimits = Rlimits::new();
    for (key, text) in &doc.rlimits {
        let resource = Rlimit::from_name(key).ok_or_else(|| PlanError::UnknownRlimit {
            service: name.into(),
            name: key.clone(),
        })?;
        let value = RlimitValue::parse(text).map_err(|reason| PlanError::InvalidRlimit {
            service: name.into(),
            name: resource,
            value: text.clone(),
            reason,
        })?;
        rlimits.insert(resource, value);
    }
    let mut resources = Resources::default();
    let r = &doc.resources;
    for (field, text) in [
        ("memory-max", &r.memory_max),
        ("memory-high", &r.memory_high),
        ("pids-max", &r.pids_max),
        ("cpu-max", &r.cpu_max),
    ] {
        if text.is_empty() {
            continue;
        }
        resources
            .parse_field(field, text)
            .map_err(|reason| PlanError::InvalidResource {
                service: name.into(),
                field,
                value: text.clone(),
                reason,
            })?;
    }
    if let Some(value) = doc.watchdog.filter(|d| d.0 <= 0) {
        return Err(PlanError::InvalidWatchdog {
            service: name.into(),
            value,
        });
    }
    if !doc.schedule.is_empty()
        && let Err(reason) = crate::Schedule::parse(&doc.schedule)
    {
        return Err(PlanError::InvalidSchedule {
            service: name.into(),
            value: doc.schedule,
            reason,
        });
    }
    let sockets = sockets_from_doc(name, doc.sockets)?;
    let mut on_file_change = BTreeMap::new();
    for (path, text) in doc.on_file_change {
        absolute("on-file-change", &path)?;
        let action =
            FileChangeAction::parse(&text).ok_or_else(|| PlanError::InvalidFileChangeAction {
                service: name.into(),
                path: path.clone(),
                value: text.clone(),
            })?;
        on_file_change.insert(path, action);
    }
    Ok(Service {
        name: name.into(),
        summary: doc.summary,
        description: doc.description,
        startup,
        override_: Override::parse(&doc.override_),
        command: doc.command,
        after: doc.after,
        before: doc.before,
        requires: doc.requires,
        workload: doc.workload,
        environment: doc.environment,
        user_id: doc.user_id,
        user: doc.user,
        group_id: doc.group_id,
        group: doc.group,
        working_dir: doc.working_dir,
        on_success,
        on_failure,
        on_check_failure,
        backoff_delay: doc.backoff_delay,
        backoff_factor,
        backoff_limit: doc.backoff_limit,
        kill_delay: doc.kill_delay,
        requires_paths: doc.requires_paths,
        on_file_change,
        persist_logs: doc.persist_logs,
        requires_checks: doc.requires_checks,
        start_grace: doc.start_grace,
        type_,
        readiness,
        rlimits,
        resources,
        sockets,
        watchdog: doc.watchdog,
        schedule: doc.schedule,
    })
}

/// A service's `sockets:`, each checked as far as one layer can: a `merge` layer may leave
/// `listen` to an earlier one, so that a socket has one at all is the combined plan's check.
fn sockets_from_doc(
    service: &str,
    docs: BTreeMap<String, Option<SocketDoc>>,
) -> Result<BTreeMap<String, HeldSocket>, PlanError> {
    let mut sockets = BTreeMap::new();
    for (name, doc) in docs {
        // The names reach the service in `LISTEN_FDNAMES`, separated by colons.
        if name.is_empty() || name.len() > 255 || name.chars().any(|c| c == ':' || c.is_control()) {
            return Err(PlanError::InvalidSocketName {
                service: service.into(),
                socket: name,
            });
        }
        let doc = doc.unwrap_or_default();
        let invalid =
            |field: &'static str, value: String, reason: String| PlanError::InvalidSocket {
                service: service.into(),
                socket: name.clone(),
                field,
                value,
                reason,
            };
        if !doc.listen.is_empty() {
            ListenAddress::parse(&doc.listen)
                .map_err(|reason| invalid("listen", doc.listen.clone(), reason))?;
        }
        if doc.backlog == Some(0) {
            return Err(invalid("backlog", "0".into(), "must be at least 1".into()));
        }
        let socket = HeldSocket {
            listen: doc.listen,
            backlog: doc.backlog,
            mode: doc.mode,
            user: doc.user,
            group: doc.group,
        };
        socket
            .file_mode()
            .map_err(|reason| invalid("mode", socket.mode.clone(), reason))?;
        sockets.insert(name, socket);
    }
    Ok(sockets)
}

fn check_from_doc(name: &str, doc: Option<CheckDoc>) -> Result<Check, PlanError> {
    if name.is_empty() {
        return Err(PlanError::EmptyCheckName);
    }
    let Some(doc) = doc else {
        return Err(PlanError::NullObject {
            kind: "check",
            name: name.into(),
        });
    };
    let level = CheckLevel::parse(&doc.level)
        .ok_or_else(|| PlanError::InvalidCheckLevel { check: name.into() })?;
    let startup = Startup::parse(&doc.startup)
        .ok_or_else(|| PlanError::InvalidCheckStartup { check: name.into() })?;
    for (field, value) in [("period", doc.period), ("timeout", doc.timeout)] {
        if value == Some(GoDuration(0)) {
            return Err(PlanError::ZeroCheckDuration {
                check: name.into(),
                field,
            });
        }
    }
    let exec = doc.exec.map(|exec| ExecCheck {
        command: exec.command,
        service_context: exec.service_context,
        environment: exec.environment,
        user_id: exec.user_id,
        user: exec.user,
        group_id: exec.group_id,
        group: exec.group,
        working_dir: exec.working_dir,
        rlimits: Default::default(),
    });
    if let Some(exec) = &exec {
        shell_split(&exec.command).map_err(|error| PlanError::InvalidCheckCommand {
            check: name.into(),
            error,
        })?;
        if let Some(reason) = user_group_problem(exec) {
            return Err(PlanError::InvalidCheckUserGroup {
                check: name.into(),
                reason: reason.into(),
            });
        }
    }
    Ok(Check {
        name: name.into(),
        override_: Override::parse(&doc.override_),
        level,
        startup,
        period: doc.period,
        timeout: doc.timeout,
        threshold: doc.threshold.unwrap_or(0),
        http: doc.http.map(|http| HttpCheck {
            url: http.url,
            headers: http.headers,
        }),
        tcp: doc.tcp.map(|tcp| TcpCheck {
            port: tcp.port.unwrap_or(0),
            host: tcp.host,
        }),
        exec,
    })
}

/// The part of Pebble's user/group normalisation that needs no user database: a group
/// without any user. Names and ids that do not exist, and ids that do not match names, are
/// found by the daemon when it looks them up.
fn user_group_problem(exec: &ExecCheck) -> Option<&'static str> {
    let has_user = exec.user_id.is_some() || !exec.user.is_empty();
    let has_group = exec.group_id.is_some() || !exec.group.is_empty();
    (!has_user && has_group).then_some("must specify user, not just group")
}

fn workload_from_doc(name: &str, doc: Option<WorkloadDoc>) -> Result<Workload, PlanError> {
    let Some(doc) = doc else {
        return Err(PlanError::NullWorkload { name: name.into() });
    };
    if name.is_empty() {
        return Err(PlanError::EmptyWorkloadName);
    }
    Ok(Workload {
        name: name.into(),
        override_: doc.override_,
        environment: doc.environment,
        user_id: doc.user_id,
        user: doc.user,
        group_id: doc.group_id,
        group: doc.group,
    })
}

fn log_target_from_doc(name: &str, doc: Option<LogTargetDoc>) -> Result<LogTarget, PlanError> {
    let Some(doc) = doc else {
        return Err(PlanError::NullObject {
            kind: "log target",
            name: name.into(),
        });
    };
    if let Some(label) = doc.labels.keys().find(|l| l.starts_with("pebble_")) {
        return Err(PlanError::ReservedLogLabel {
            target: name.into(),
            label: label.clone(),
        });
    }
    if !doc.type_.is_empty() && !LOG_TARGET_TYPES.contains(&doc.type_.as_str()) {
        return Err(PlanError::UnsupportedLogTargetType {
            target: name.into(),
            kind: doc.type_,
        });
    }
    Ok(LogTarget {
        name: name.into(),
        override_: Override::parse(&doc.override_),
        type_: doc.type_,
        location: doc.location,
        services: doc.services,
        labels: doc.labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the quick reader makes of `yaml`, if it takes it.
    fn quickly(yaml: &str) -> Option<LayerDoc> {
        simple_yaml::deserialize(yaml, LayerSeed(&Progress::default()), options)
    }

    /// Scalars chosen for what YAML's type inference, quoting and comments make of them.
    const SCALARS: &[&str] = &[
        "plain",
        "two words",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "null",
        "~",
        "Null",
        "123",
        "0",
        "0755",
        "0x1F",
        "0o17",
        "1e3",
        "1.5",
        "-1",
        "+1",
        ".inf",
        "-.inf",
        ".nan",
        "1s",
        "1m30s",
        "100ms",
        "-5s",
        "a#b",
        "a #b",
        "x # comment",
        "'quoted'",
        "'it''s'",
        "''",
        "\"double\"",
        "\"\"",
        "\"esc\\n\"",
        "\"null\"",
        "'1s'",
        "[a, b]",
        "[]",
        "[a,]",
        "[ a ]",
        "['x', \"y\"]",
        "{}",
        "{a: b}",
        "a: b",
        "a:b",
        "&x y",
        "*x",
        "!!str 1",
        "!x y",
        "|",
        ">",
        "- x",
        "-x",
        "@x",
        "`x",
        "%x",
        "?x",
        ":x",
        "ünïcödé",
        "\u{a0}x",
        "x\u{a0}",
        "2001-12-14",
        "0.0.0.0:80",
        "http://h/p#f",
        "sh -c 'exit 3'",
        "/bin/x --flag=1",
    ];

    const FIELDS: &[&str] = &[
        "summary",
        "description",
        "command",
        "startup",
        "override",
        "after",
        "before",
        "requires",
        "environment",
        "user-id",
        "user",
        "group-id",
        "working-dir",
        "on-success",
        "on-check-failure",
        "backoff-delay",
        "backoff-factor",
        "backoff-limit",
        "kill-delay",
        "persist-logs",
        "requires-paths",
        "bogus-field",
    ];

    /// A small deterministic generator (xorshift), so that a failure names its seed.
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    /// A layer of a few services whose fields hold random scalars, sequences and maps.
    fn random_layer(random: &mut Random) -> String {
        let mut yaml = String::new();
        if random.below(4) == 0 {
            yaml.push_str("---\n");
        }
        if random.below(3) == 0 {
            yaml.push_str(&format!("summary: {}\n", random.pick(SCALARS)));
        }
        yaml.push_str(if random.below(2) == 0 {
            "services:\n"
        } else {
            "services: # all\n"
        });
        for service in 0..1 + random.below(3) {
            let indent = [2, 4][random.below(2)];
            let pad = " ".repeat(indent);
            yaml.push_str(&format!("{pad}svc-{service}:\n"));
            let inner = " ".repeat(indent * 2);
            for _ in 0..random.below(6) {
                let field = random.pick(FIELDS);
                match random.below(5) {
                    0 => {
                        yaml.push_str(&format!("{inner}{field}:\n"));
                        // A sequence may sit at its key's indentation or deeper.
                        let item_pad = if random.below(2) == 0 {
                            inner.clone()
                        } else {
                            format!("{inner}{pad}")
                        };
                        for _ in 0..1 + random.below(3) {
                            yaml.push_str(&format!("{item_pad}- {}\n", random.pick(SCALARS)));
                        }
                    }
                    1 => {
                        yaml.push_str(&format!("{inner}{field}:\n"));
                        for _ in 0..1 + random.below(3) {
                            yaml.push_str(&format!(
                                "{inner}{pad}{}: {}\n",
                                random.pick(&["A", "B", "PORT", "a b", "null"]),
                                random.pick(SCALARS)
                            ));
                        }
                    }
                    2 => yaml.push_str(&format!("{inner}# a comment\n{inner}{field}:\n")),
                    _ => yaml.push_str(&format!("{inner}{field}: {}\n", random.pick(SCALARS))),
                }
            }
        }
        yaml
    }

    #[test]
    fn the_quick_reader_agrees_with_the_full_parser_wherever_it_answers() {
        let mut read = 0;
        for seed in 1..=60_000u64 {
            let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let yaml = random_layer(&mut random);
            let Some(quick) = quickly(&yaml) else {
                continue;
            };
            read += 1;
            match decode_fully("test", &yaml, Words::Cobble) {
                Ok(full) => assert_eq!(
                    format!("{quick:?}"),
                    format!("{full:?}"),
                    "seed {seed}, the two readers differ on:\n{yaml}"
                ),
                Err(error) => {
                    panic!(
                        "seed {seed}: the quick reader took what the full parser refuses ({error}):\n{yaml}"
                    )
                }
            }
        }
        // Enough of them go the quick way for the comparison to mean something.
        assert!(
            read > 3_000,
            "only {read} of 60000 layers were read quickly"
        );
    }

    #[test]
    fn a_plain_layer_of_many_services_is_read_quickly() {
        let mut yaml = String::from("summary: many\nservices:\n");
        for i in 0..100 {
            yaml.push_str(&format!(
                "  svc-{i:03}:\n    override: replace\n    summary: sleeper {i}\n    \
                 command: sleep 100000\n    startup: enabled\n    after: [svc-000]\n    \
                 backoff-delay: 1s\n    environment:\n      TOKEN: x\n"
            ));
        }
        let quick = quickly(&yaml).expect("read quickly");
        assert_eq!(quick.services.len(), 100);
        assert_eq!(
            format!("{quick:?}"),
            format!("{:?}", decode_fully("many", &yaml, Words::Cobble).unwrap())
        );
    }
}
