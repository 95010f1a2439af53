//! Who may make the server's own host run something.
//!
//! A run of `native`, or of `local` or `sim` without SSH, executes on the server's host with
//! the server's rights: its program (the app's command), and its template's service scripts
//! and checks, in directories the profile names. The decision reads what the run resolved
//! to, every part of it, never the app alone: a namespace admin could otherwise point an
//! approved app at a profile or template of its own. Each part must come from an instance
//! admin (an app it deployed, a profile or template it wrote, SYSTEM ones included), unless
//! an instance admin allowed host programs for the whole namespace.

use crate::model::access::Trust;

/// What a run that executes on the server's host resolved to, by who wrote each part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRun {
    /// An instance admin set `allowHostPrograms` on the run's namespace.
    pub namespace_allows: bool,
    /// The app was deployed by an instance admin.
    pub app_approved: bool,
    /// The author of the run's profile.
    pub profile: Trust,
    /// The author of the run's template, if it has one.
    pub template: Option<Trust>,
}

/// The part of a run that may not execute on the server's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPart {
    /// The app: deployed by a namespace admin.
    App,
    /// The profile: written by someone less trusted than an instance admin.
    Profile(Trust),
    /// The template: written by someone less trusted than an instance admin.
    Template(Trust),
}

/// The first part of `run` that may not execute on the server's host, if any.
pub fn refusal(run: &HostRun) -> Option<HostPart> {
    if run.namespace_allows {
        return None;
    }
    if !run.app_approved {
        return Some(HostPart::App);
    }
    if run.profile < Trust::InstanceAdmin {
        return Some(HostPart::Profile(run.profile));
    }
    match run.template {
        Some(t) if t < Trust::InstanceAdmin => Some(HostPart::Template(t)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Trust::*;

    #[test]
    fn every_part_must_come_from_an_instance_admin_unless_the_namespace_allows() {
        let ok = HostRun {
            namespace_allows: false,
            app_approved: true,
            profile: InstanceAdmin,
            template: Some(InstanceAdmin),
        };
        // (what changes, what is refused)
        let table: &[(HostRun, Option<HostPart>)] = &[
            (ok, None),
            (
                HostRun {
                    template: None,
                    ..ok
                },
                None,
            ),
            (
                HostRun {
                    app_approved: false,
                    ..ok
                },
                Some(HostPart::App),
            ),
            (
                HostRun {
                    profile: NamespaceAdmin,
                    ..ok
                },
                Some(HostPart::Profile(NamespaceAdmin)),
            ),
            (
                HostRun {
                    template: Some(NamespaceAdmin),
                    ..ok
                },
                Some(HostPart::Template(NamespaceAdmin)),
            ),
            (
                HostRun {
                    template: Some(Operator),
                    profile: NamespaceAdmin,
                    ..ok
                },
                Some(HostPart::Profile(NamespaceAdmin)),
            ),
        ];
        for (run, want) in table {
            assert_eq!(refusal(run), *want, "{run:?}");
            // A namespace that allows host programs allows every part.
            let allowed = HostRun {
                namespace_allows: true,
                ..*run
            };
            assert_eq!(refusal(&allowed), None, "{run:?}");
        }
    }
}
