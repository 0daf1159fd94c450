//! Start and stop ordering, and lanes.
//!
//! Two different relations are at play. `requires` decides *which* services take part:
//! starting a service starts what it requires (transitively), stopping one stops what
//! requires it. `after`/`before` decide only the *order* among the services taking part;
//! names outside the set, or unknown altogether, are ignored. The order is a topological sort
//! of the after/before graph (Tarjan's algorithm, so a cycle is found as a strongly connected
//! component and reported by name).
//!
//! Lanes are what the daemon runs concurrently. As in Pebble, only `requires` links services
//! into one lane; services related only by after/before land in different lanes and so start
//! in parallel.

use std::collections::{BTreeMap, BTreeSet};

use crate::Plan;
use crate::error::PlanError;

impl Plan {
    /// The services to start for `names`, in start order: `names` plus everything they
    /// transitively require, sorted by after/before.
    pub fn start_order(&self, names: &[String]) -> Result<Vec<String>, PlanError> {
        self.order(names, Direction::Start)
    }

    /// The services to stop for `names`, in stop order: `names` plus everything that
    /// transitively requires them, sorted by reversed after/before.
    pub fn stop_order(&self, names: &[String]) -> Result<Vec<String>, PlanError> {
        self.order(names, Direction::Stop)
    }

    /// Splits an ordered list into lanes: services linked by `requires` (in either
    /// direction, transitively within `order`) share a lane, except a service and a
    /// one-shot (`type: oneshot`) it is also `after`; lanes appear in the order of their
    /// first service, and each lane keeps the order of `order`.
    pub fn lanes(&self, order: &[String]) -> Vec<Vec<String>> {
        let position: BTreeMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(index, name)| (name.as_str(), index))
            .collect();
        // Union-find over positions, always keeping the earliest position as the root so a
        // lane is identified by its first service.
        let mut parent: Vec<usize> = (0..order.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        for (index, name) in order.iter().enumerate() {
            let Some(service) = self.services.get(name) else {
                continue;
            };
            for required in &service.requires {
                // A one-shot it is ordered after holds it back by itself (the supervisor
                // starts it once the one-shot completes): in a lane apart, the services
                // after one one-shot all start the moment it completes, not one by one.
                if service.after.contains(required)
                    && self
                        .services
                        .get(required)
                        .is_some_and(|s| s.type_.is_oneshot())
                {
                    continue;
                }
                if let Some(&other) = position.get(required.as_str()) {
                    let (a, b) = (root(&mut parent, index), root(&mut parent, other));
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut lanes: Vec<Vec<String>> = Vec::new();
        let mut lane_of_root = BTreeMap::new();
        for (index, name) in order.iter().enumerate() {
            let lane_root = root(&mut parent, index);
            let lane = *lane_of_root.entry(lane_root).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[lane].push(name.clone());
        }
        lanes
    }

    fn order(&self, names: &[String], direction: Direction) -> Result<Vec<String>, PlanError> {
        let selected = self.closure(names, direction)?;

        // `must_precede[x]` lists the selected services that must come before x.
        let mut must_precede: BTreeMap<&str, Vec<&str>> = selected
            .iter()
            .map(|name| (name.as_str(), Vec::new()))
            .collect();
        for name in &selected {
            let service = self
                .services
                .get(name)
                .ok_or_else(|| PlanError::ServiceNotFound { name: name.clone() })?;
            let (earlier, later) = match direction {
                Direction::Start => (&service.after, &service.before),
                Direction::Stop => (&service.before, &service.after),
            };
            for other in earlier.iter().filter(|o| selected.contains(*o)) {
                must_precede
                    .get_mut(name.as_str())
                    .expect("selected")
                    .push(other);
            }
            for other in later.iter().filter(|o| selected.contains(*o)) {
                must_precede
                    .get_mut(other.as_str())
                    .expect("selected")
                    .push(name);
            }
        }

        let mut ordered = Vec::with_capacity(selected.len());
        for component in strongly_connected(&must_precede) {
            if component.len() > 1 {
                let mut names: Vec<String> = component.iter().map(|s| s.to_string()).collect();
                names.sort();
                return Err(PlanError::OrderLoop { names });
            }
            ordered.push(component[0].to_owned());
        }
        Ok(ordered)
    }

    /// The requested names plus their transitive requirements (start) or dependents (stop).
    fn closure(
        &self,
        names: &[String],
        direction: Direction,
    ) -> Result<BTreeSet<String>, PlanError> {
        let mut dependents: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        if direction == Direction::Stop {
            for (name, service) in &self.services {
                for required in &service.requires {
                    dependents.entry(required).or_default().push(name);
                }
            }
        }
        let mut selected = BTreeSet::new();
        let mut pending: Vec<String> = names.iter().rev().cloned().collect();
        while let Some(name) = pending.pop() {
            if selected.contains(&name) {
                continue;
            }
            match direction {
                Direction::Start => {
                    let service = self
                        .services
                        .get(&name)
                        .ok_or_else(|| PlanError::ServiceNotFound { name: name.clone() })?;
                    pending.extend(service.requires.iter().cloned());
                }
                Direction::Stop => {
                    if let Some(list) = dependents.get(name.as_str()) {
                        pending.extend(list.iter().map(|s| s.to_string()));
                    }
                }
            }
            selected.insert(name);
        }
        Ok(selected)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Start,
    Stop,
}

/// Tarjan's algorithm over `edges` (node -> nodes that must come first). Components come out
/// with every node after the nodes it depends on; roots are visited in name order so the
/// result is deterministic.
fn strongly_connected<'a>(edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct Tarjan<'a, 'g> {
        edges: &'g BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        lowlink: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<&'a str>,
        output: Vec<Vec<&'a str>>,
    }

    impl<'a> Tarjan<'a, '_> {
        fn visit(&mut self, node: &'a str) -> usize {
            let index = self.lowlink.len();
            self.index.insert(node, index);
            self.lowlink.push(index);
            self.on_stack.push(true);
            self.stack.push(node);
            for &next in self.edges.get(node).into_iter().flatten() {
                match self.index.get(next) {
                    None => {
                        let low = self.visit(next);
                        self.lowlink[index] = self.lowlink[index].min(low);
                    }
                    Some(&seen) if self.on_stack[seen] => {
                        self.lowlink[index] = self.lowlink[index].min(seen);
                    }
                    Some(_) => {}
                }
            }
            if self.lowlink[index] == index {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack[self.index[member]] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                self.output.push(component);
            }
            self.lowlink[index]
        }
    }

    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        lowlink: Vec::new(),
        on_stack: Vec::new(),
        stack: Vec::new(),
        output: Vec::new(),
    };
    for &node in edges.keys() {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    tarjan.output
}
