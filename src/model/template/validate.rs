//! A template's validation: a pure function that names the first bad field (unknown
//! services, a `requires` nothing provides, dependency cycles, inconsistent constraints,
//! types and sizes past their limits).

use std::collections::BTreeMap;

use super::{
    Action, ActionKind, CHECK_INTERVALS, Heal, MAX_ACTION_ATTEMPTS, MAX_ACTION_FIELDS,
    MAX_ACTION_TIMEOUT, MAX_CONSTRAINED_SERVICES, MAX_HEAL_ATTEMPTS, MAX_LIST, MAX_SERVICES,
    MAX_TYPES, Template, TypeMap, invalid,
};
use crate::model::invalid::Invalid;
use crate::model::names;

impl Template {
    /// Checks the whole template; the error names the first bad field.
    pub fn validate(&self) -> Result<(), Invalid> {
        self.validate_size()?;
        let providers = self.providers();
        for (name, service) in &self.services {
            let at = |f: &str| format!("services.{name}.{f}");
            names::check(&format!("services.{name}"), name)?;
            let deps = &service.dependencies;
            for (set, which) in [(&deps.install, "install"), (&deps.runtime, "runtime")] {
                for (list, kind) in [(&set.requires, "requires"), (&set.uses, "uses")] {
                    for (i, dep) in list.iter().enumerate() {
                        if !providers.contains_key(dep.as_str()) {
                            return Err(invalid(
                                at(&format!("dependencies.{which}.{kind}[{i}]")),
                                format!(
                                    "'{dep}' is not a service of this template and no service provides it"
                                ),
                            ));
                        }
                        if providers[dep.as_str()].contains(name.as_str()) {
                            return Err(invalid(
                                at(&format!("dependencies.{which}.{kind}[{i}]")),
                                format!("service '{name}' cannot depend on itself"),
                            ));
                        }
                    }
                }
            }
            for (i, c) in deps.conflicts.iter().enumerate() {
                if !self.services.contains_key(c) {
                    return Err(invalid(
                        at(&format!("dependencies.conflicts[{i}]")),
                        format!("'{c}' is not a service of this template"),
                    ));
                }
            }
            if service.logs.len() > super::MAX_LOGS {
                return Err(invalid(
                    at("logs"),
                    format!("names at most {} files", super::MAX_LOGS),
                ));
            }
            for (i, path) in service.logs.iter().enumerate() {
                if !super::valid_log_path(path) {
                    return Err(invalid(
                        at(&format!("logs[{i}]")),
                        "must be a path under the node's directory: parts of A-Za-z0-9._- separated by /, no '..', at most 256 bytes",
                    ));
                }
            }
            if let Some(text) = &service.check_interval {
                let field = at("checkInterval");
                if !service.actions.contains_key(&ActionKind::Check) {
                    return Err(invalid(field, "needs a check action (actions.check)"));
                }
                match ebb_spi::parse_duration(text) {
                    Ok(d) if CHECK_INTERVALS.contains(&d) => {}
                    Ok(_) => {
                        return Err(invalid(
                            field,
                            format!("must be between 1s and 1day, got {text}"),
                        ));
                    }
                    Err(e) => return Err(invalid(field, e)),
                }
            }
            if service.heal.is_some_and(|h| h != Heal::None)
                && !service.actions.contains_key(&ActionKind::Check)
            {
                return Err(invalid(
                    at("heal"),
                    "needs a check action (actions.check): healing acts on what the check finds",
                ));
            }
            if let Some(n) = service.heal_attempts
                && !(1..=MAX_HEAL_ATTEMPTS).contains(&n)
            {
                return Err(invalid(
                    at("healAttempts"),
                    format!("must be between 1 and {MAX_HEAL_ATTEMPTS}, got {n}"),
                ));
            }
            if let Some(text) = &service.heal_window {
                match ebb_spi::parse_duration(text) {
                    Ok(d) if CHECK_INTERVALS.contains(&d) => {}
                    Ok(_) => {
                        return Err(invalid(
                            at("healWindow"),
                            format!("must be between 1s and 1day, got {text}"),
                        ));
                    }
                    Err(e) => return Err(invalid(at("healWindow"), e)),
                }
            }
            for (kind, action) in &service.actions {
                let (timeout, attempts) = action.limits();
                let shell_only = match kind {
                    ActionKind::Check => Some("a check is a shell script (exit 0: up, 3: down)"),
                    ActionKind::Reset => Some("a reset is a shell script"),
                    ActionKind::Install
                    | ActionKind::Configure
                    | ActionKind::Initialize
                    | ActionKind::Start
                    | ActionKind::Stop
                    | ActionKind::Remove => None,
                };
                let kind = serde_json::to_value(kind).unwrap_or_default();
                let field = |f: &str| {
                    at(&format!(
                        "actions.{}.{f}",
                        kind.as_str().unwrap_or_default()
                    ))
                };
                match action {
                    Action::Shell { script, .. } => {
                        if script.trim().is_empty() {
                            return Err(invalid(field("script"), "must not be empty"));
                        }
                    }
                    Action::Plugin {
                        automator, fields, ..
                    } => {
                        if let Some(why) = shell_only {
                            return Err(invalid(field("type"), why));
                        }
                        if automator.is_empty()
                            || automator.len() > 40
                            || !automator
                                .chars()
                                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        {
                            return Err(invalid(
                                field("type"),
                                format!(
                                    "'{automator}' is neither shell nor an automator plugin's name"
                                ),
                            ));
                        }
                        if fields.len() > MAX_ACTION_FIELDS {
                            return Err(invalid(
                                field("type"),
                                format!("an action has at most {MAX_ACTION_FIELDS} fields"),
                            ));
                        }
                    }
                }
                if let Some(t) = timeout {
                    match ebb_spi::parse_duration(t) {
                        Ok(d) if d.is_zero() => {
                            return Err(invalid(field("timeout"), "must be more than zero"));
                        }
                        Ok(d) if d > MAX_ACTION_TIMEOUT => {
                            return Err(invalid(
                                field("timeout"),
                                format!(
                                    "must be at most {}, got {t}",
                                    humantime::format_duration(MAX_ACTION_TIMEOUT)
                                ),
                            ));
                        }
                        Ok(_) => {}
                        Err(e) => return Err(invalid(field("timeout"), e)),
                    }
                }
                if let Some(n) = attempts
                    && !(1..=MAX_ACTION_ATTEMPTS).contains(&n)
                {
                    return Err(invalid(
                        field("attempts"),
                        format!("must be between 1 and {MAX_ACTION_ATTEMPTS}"),
                    ));
                }
            }
        }
        for which in ["install", "runtime"] {
            if let Some(cycle) = self.cycle(which) {
                return Err(invalid(
                    format!("services (dependencies.{which})"),
                    format!("dependency cycle: {}", cycle.join(" → ")),
                ));
            }
        }
        self.validate_types()?;
        self.validate_constraints()
    }

    fn service_list(&self, field: &str, list: &[String]) -> Result<(), Invalid> {
        for (i, s) in list.iter().enumerate() {
            if !self.services.contains_key(s) {
                return Err(invalid(
                    format!("{field}[{i}]"),
                    format!("'{s}' is not a service of this template"),
                ));
            }
        }
        Ok(())
    }

    fn type_list(&self, field: &str, list: &[String], types: &TypeMap) -> Result<(), Invalid> {
        for (i, t) in list.iter().enumerate() {
            if !types.contains_key(t) {
                return Err(invalid(
                    format!("{field}[{i}]"),
                    format!("'{t}' is not defined in this template"),
                ));
            }
        }
        Ok(())
    }

    fn validate_types(&self) -> Result<(), Invalid> {
        for (field, types) in [
            ("hardwareTypes", &self.hardware_types),
            ("imageTypes", &self.image_types),
        ] {
            for name in types.keys() {
                names::check(&format!("{field}.{name}"), name)?;
            }
        }
        let c = &self.compatibility;
        self.service_list("compatibility.services", &c.services)?;
        self.type_list(
            "compatibility.hardwareTypes",
            &c.hardware_types,
            &self.hardware_types,
        )?;
        self.type_list(
            "compatibility.imageTypes",
            &c.image_types,
            &self.image_types,
        )?;
        let d = &self.defaults;
        self.service_list("defaults.services", &d.services)?;
        for (i, s) in d.services.iter().enumerate() {
            if !c.services.is_empty() && !c.services.contains(s) {
                return Err(invalid(
                    format!("defaults.services[{i}]"),
                    format!("'{s}' is not in compatibility.services"),
                ));
            }
        }
        if let Some(h) = &d.hardware_type {
            self.type_list(
                "defaults.hardwareType",
                std::slice::from_ref(h),
                &self.hardware_types,
            )?;
        }
        if let Some(i) = &d.image_type {
            self.type_list(
                "defaults.imageType",
                std::slice::from_ref(i),
                &self.image_types,
            )?;
        }
        Ok(())
    }

    fn validate_constraints(&self) -> Result<(), Invalid> {
        let k = &self.constraints;
        if let Some(size) = k.size
            && size.min > size.max
        {
            return Err(invalid(
                "constraints.size",
                format!("min {} is above max {}", size.min, size.max),
            ));
        }
        for (field, groups) in [
            ("mustCoexist", &k.layout.must_coexist),
            ("cantCoexist", &k.layout.cant_coexist),
        ] {
            for (i, group) in groups.iter().enumerate() {
                self.service_list(&format!("constraints.layout.{field}[{i}]"), group)?;
                if group.len() < 2 {
                    return Err(invalid(
                        format!("constraints.layout.{field}[{i}]"),
                        "a group names at least two services",
                    ));
                }
            }
        }
        for (name, sc) in &k.services {
            let at = |f: &str| format!("constraints.services.{name}{f}");
            if !self.services.contains_key(name) {
                return Err(invalid(
                    at(""),
                    format!("'{name}' is not a service of this template"),
                ));
            }
            self.type_list(
                &at(".hardwareTypes"),
                &sc.hardware_types,
                &self.hardware_types,
            )?;
            self.type_list(&at(".imageTypes"), &sc.image_types, &self.image_types)?;
            if let Some(q) = sc.quantities
                && q.min > q.max
            {
                return Err(invalid(
                    at(".quantities"),
                    format!("min {} is above max {}", q.min, q.max),
                ));
            }
            if let Some(r) = sc.ratio
                && !(0.0 <= r.min && r.min <= r.max && r.max <= 1.0)
            {
                return Err(invalid(at(".ratio"), "needs 0 <= min <= max <= 1"));
            }
            if sc.odd
                && let Some(q) = sc.quantities
                && q.min == q.max
                && q.min % 2 == 0
            {
                return Err(invalid(
                    at(".odd"),
                    format!("quantities fix the count at {}, which is even", q.min),
                ));
            }
        }
        Ok(())
    }

    /// A dependency cycle in the `which` order, as a path that returns to its start.
    ///
    /// An iterative depth-first search over the services in name order, linear in the number
    /// of dependencies: no recursion, so no template can exhaust the stack.
    pub(super) fn cycle(&self, which: &str) -> Option<Vec<String>> {
        let providers = self.providers();
        let names: Vec<&str> = self.services.keys().map(String::as_str).collect();
        let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let next: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                self.predecessors_in(&providers, n, which)
                    .into_iter()
                    .filter_map(|p| index.get(p).copied())
                    .collect()
            })
            .collect();
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let mut marks = vec![Mark::New; names.len()];
        for start in 0..names.len() {
            if marks[start] != Mark::New {
                continue;
            }
            marks[start] = Mark::OnPath;
            // The path from `start`, each with the index of its next successor to visit.
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            while let Some((node, cursor)) = path.last_mut() {
                let Some(&w) = next[*node].get(*cursor) else {
                    marks[*node] = Mark::Done;
                    path.pop();
                    continue;
                };
                *cursor += 1;
                match marks[w] {
                    Mark::New => {
                        marks[w] = Mark::OnPath;
                        path.push((w, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|(p, _)| *p == w).unwrap_or(0);
                        let mut cycle: Vec<String> = path[from..]
                            .iter()
                            .map(|(p, _)| names[*p].to_string())
                            .collect();
                        cycle.push(names[w].to_string());
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            }
        }
        None
    }

    /// Checks the template's size against [`MAX_SERVICES`], [`MAX_CONSTRAINED_SERVICES`],
    /// [`MAX_TYPES`] and [`MAX_LIST`] before anything walks it.
    fn validate_size(&self) -> Result<(), Invalid> {
        let over = |field: &str, what: &str, count: usize, limit: usize| {
            invalid(
                field,
                format!("has {count} {what}, more than the limit of {limit}"),
            )
        };
        if self.services.len() > MAX_SERVICES {
            return Err(over(
                "services",
                "services",
                self.services.len(),
                MAX_SERVICES,
            ));
        }
        for (field, types) in [
            ("hardwareTypes", &self.hardware_types),
            ("imageTypes", &self.image_types),
        ] {
            if types.len() > MAX_TYPES {
                return Err(over(field, "types", types.len(), MAX_TYPES));
            }
        }
        // Each list's field is named only when it is too long.
        let list = |count: usize, field: &dyn Fn() -> String| {
            if count > MAX_LIST {
                return Err(over(&field(), "entries", count, MAX_LIST));
            }
            Ok(())
        };
        for (name, service) in &self.services {
            let deps = &service.dependencies;
            for (set, which) in [(&deps.install, "install"), (&deps.runtime, "runtime")] {
                for (entries, kind) in [(&set.requires, "requires"), (&set.uses, "uses")] {
                    list(entries.len(), &|| {
                        format!("services.{name}.dependencies.{which}.{kind}")
                    })?;
                }
            }
            for (entries, kind) in [(&deps.provides, "provides"), (&deps.conflicts, "conflicts")] {
                list(entries.len(), &|| {
                    format!("services.{name}.dependencies.{kind}")
                })?;
            }
        }
        let layout = &self.constraints.layout;
        for (field, groups) in [
            ("mustCoexist", &layout.must_coexist),
            ("cantCoexist", &layout.cant_coexist),
        ] {
            list(groups.len(), &|| format!("constraints.layout.{field}"))?;
            for (i, g) in groups.iter().enumerate() {
                list(g.len(), &|| format!("constraints.layout.{field}[{i}]"))?;
            }
        }
        let constrained = self.constrained_services().len();
        if constrained > MAX_CONSTRAINED_SERVICES {
            return Err(over(
                "constraints",
                "constrained services (with a constraint or in a coexist group)",
                constrained,
                MAX_CONSTRAINED_SERVICES,
            ));
        }
        Ok(())
    }
}
