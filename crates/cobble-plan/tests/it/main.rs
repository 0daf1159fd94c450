//! Integration tests for cobble-plan: whole layers in, plans, orders and YAML out.

mod add_layer;
mod combine;
mod extensions;
mod fields;
mod hostile;
mod layers_dir;
mod order;
mod parse;
mod workloads;
mod yaml_output;

use cobble_plan::{Layer, Plan, PlanError};

/// Removes the common leading indentation so YAML can be written indented in test code.
pub fn dedent(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().skip_while(|l| l.trim().is_empty()).collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for line in lines {
        out.push_str(line.get(indent..).unwrap_or("").trim_end());
        out.push('\n');
    }
    out
}

/// Parses `yaml` as layer `layer-<order>`.
pub fn parse(order: u64, yaml: &str) -> Result<Layer, PlanError> {
    Layer::parse(order, &format!("layer-{order}"), &dedent(yaml))
}

/// Parses each document as a layer and combines them.
pub fn plan(yamls: &[&str]) -> Result<Plan, PlanError> {
    let mut layers = Vec::new();
    for (order, yaml) in yamls.iter().enumerate() {
        layers.push(parse(order as u64, yaml)?);
    }
    Plan::from_layers(layers)
}

pub fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}
