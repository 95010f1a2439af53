//! Profile resolution: which profile a run uses and with which property values.
//!
//! Pure functions over plain data; no store, no IO. The caller gathers the levels (instance,
//! namespace, app config, app preferences, program preferences, runtime arguments), each a
//! map of string keys, and looks profiles up. Two keys matter (CDAP-compatible):
//! - `system.profile.name` = `SYSTEM:x` | `USER:x` | `x`: the most specific level that sets it
//!   picks the profile; with none, the instance default `SYSTEM:native`.
//! - `system.profile.properties.<p>` overrides property `<p>`; the most specific level wins.
//!   Overrides from every level apply, whichever level picked the profile.
//!
//! Overriding is opt-in, as CDAP's `isEditable` means it: a level may change only a property
//! the profile sets and marks editable (an override with the profile's own value changes
//! nothing and is let through). A property the provisioner marks author-only (endpoints,
//! regions, credentials, hosts, directories, the template, the SSH user) is never changed
//! by a level whose writer is trusted less than the profile's author, editable or not, so an
//! operator's runtime arguments cannot point a run's credentials at a listener of its own.
//! Runtime arguments never refer to secure keys.

use std::collections::BTreeMap;

use crate::model::access::Trust;
use crate::model::profile::{Profile, ProfileId, Scope};
use crate::model::property::{
    EffectiveProperty, Level, Origin, PROFILE_KEY, PROPERTY_PREFIX, QUEUE_KEY, Values,
};

/// Why resolution failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{PROFILE_KEY} in {level}: {message}")]
    BadProfileName { level: Level, message: String },
    #[error(
        "{PROFILE_KEY} in instance preferences must name a SYSTEM profile (SYSTEM:<name>), got '{value}'"
    )]
    UserProfileAtInstance { value: String },
    #[error("{key} in {level}: the property name is empty")]
    EmptyPropertyName { key: String, level: Level },
    #[error(
        "{key} in {level}: runtime arguments may not refer to secure keys; a secret comes only from a profile or preferences an admin sets"
    )]
    SecretInArguments { key: String, level: Level },
    #[error(
        "property '{property}' of {profile} is not editable, but {level} override it ({PROPERTY_PREFIX}{property}); remove the override or make the property editable"
    )]
    NotEditable {
        property: String,
        profile: ProfileId,
        level: Level,
    },
    #[error(
        "property '{property}' is not set by {profile}, so {level} may not set it ({PROPERTY_PREFIX}{property}); only properties the profile sets and marks editable may be overridden"
    )]
    NotInProfile {
        property: String,
        profile: ProfileId,
        level: Level,
    },
    #[error(
        "property '{property}' of {profile} may be set only by its author ({author}), but {level} override it ({PROPERTY_PREFIX}{property}); it decides where or with what rights the run's cluster is reached"
    )]
    AuthorOnly {
        property: String,
        profile: ProfileId,
        level: Level,
        author: Trust,
    },
    #[error("{QUEUE_KEY} in {level} must be true or false, got '{value}'")]
    BadQueue { level: Level, value: String },
}

/// Whether a start that a limit refuses waits in the queue: what the most specific level
/// that sets `system.run.queue` says, if any does.
pub fn queue_wanted(levels: &[(Level, &Values)]) -> Result<Option<bool>, ResolveError> {
    let mut chosen: Option<(Level, bool)> = None;
    for (level, values) in levels {
        let Some(value) = values.get(QUEUE_KEY) else {
            continue;
        };
        let wanted = ebb_spi::parse_bool(value).map_err(|_| ResolveError::BadQueue {
            level: *level,
            value: value.chars().take(64).collect(),
        })?;
        if chosen.is_none_or(|(at, _)| *level > at) {
            chosen = Some((*level, wanted));
        }
    }
    Ok(chosen.map(|(_, wanted)| wanted))
}

/// The profile a run uses and the level that chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenProfile {
    pub id: ProfileId,
    pub origin: Origin,
}

/// A run's resolved profile: which one, and its effective properties by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub profile: ChosenProfile,
    pub properties: Vec<EffectiveProperty>,
}

/// Picks the profile for a run in `namespace` from `levels` (any order; each level at most
/// once).
pub fn choose_profile(
    namespace: &str,
    levels: &[(Level, &Values)],
) -> Result<ChosenProfile, ResolveError> {
    let mut chosen: Option<(Level, &String)> = None;
    for (level, values) in levels {
        if let Some(value) = values.get(PROFILE_KEY)
            && chosen.is_none_or(|(at, _)| *level > at)
        {
            chosen = Some((*level, value));
        }
    }
    let Some((level, value)) = chosen else {
        return Ok(ChosenProfile {
            id: ProfileId::native(),
            origin: Origin::Default,
        });
    };
    let id = ProfileId::parse_scoped(namespace, value)
        .map_err(|message| ResolveError::BadProfileName { level, message })?;
    if level == Level::Instance && id.scope != Scope::System {
        return Err(ResolveError::UserProfileAtInstance {
            value: value.clone(),
        });
    }
    Ok(ChosenProfile {
        id,
        origin: Origin::Level(level),
    })
}

/// Checks the override keys of one level: each must name a property, and runtime
/// arguments hold no reference to a secure key (an operator may not make ebb send a secret
/// anywhere it chooses).
pub fn check_overrides(level: Level, values: &Values) -> Result<(), ResolveError> {
    if let Some(key) = values.keys().find(|k| k.as_str() == PROPERTY_PREFIX) {
        return Err(ResolveError::EmptyPropertyName {
            key: key.clone(),
            level,
        });
    }
    if level.writer() < Trust::NamespaceAdmin
        && let Some((key, _)) = values
            .iter()
            .find(|(_, v)| crate::model::property::mentions_secure(v))
    {
        return Err(ResolveError::SecretInArguments {
            key: key.clone(),
            level,
        });
    }
    Ok(())
}

/// Who wrote a profile and what its provisioner fixes: what overrides may change.
#[derive(Debug, Clone, Copy)]
pub struct Authority<'a> {
    /// The profile's author: instance admins for SYSTEM profiles.
    pub author: Trust,
    /// The profile's provisioner, which marks its author-only properties.
    pub spec: &'a ebb_spi::ProvisionerSpec,
}

/// Applies the property overrides in `levels` to `profile` (identified by `id`), as
/// `authority` allows.
pub fn effective_properties(
    id: &ProfileId,
    profile: &Profile,
    authority: Authority<'_>,
    levels: &[(Level, &Values)],
) -> Result<Vec<EffectiveProperty>, ResolveError> {
    for (level, values) in levels {
        check_overrides(*level, values)?;
    }
    let mut sorted: Vec<&(Level, &Values)> = levels.iter().collect();
    sorted.sort_by_key(|(level, _)| *level);

    let mut effective: BTreeMap<String, EffectiveProperty> = profile
        .provisioner
        .properties
        .iter()
        .map(|p| {
            let e = EffectiveProperty {
                name: p.name.clone(),
                value: p.value.clone(),
                origin: Origin::Profile,
            };
            (p.name.clone(), e)
        })
        .collect();
    for (level, values) in sorted {
        for (key, value) in values.iter() {
            let Some(property) = key.strip_prefix(PROPERTY_PREFIX) else {
                continue;
            };
            let set = profile
                .provisioner
                .properties
                .iter()
                .find(|p| p.name == property);
            let refusal = match set {
                None => Some(ResolveError::NotInProfile {
                    property: property.to_string(),
                    profile: id.clone(),
                    level: *level,
                }),
                // The profile's own value changes nothing.
                Some(set) if set.value == *value => continue,
                Some(set) if !set.is_editable => Some(ResolveError::NotEditable {
                    property: property.to_string(),
                    profile: id.clone(),
                    level: *level,
                }),
                Some(_)
                    if authority.spec.author_only(property)
                        && level.writer() < authority.author =>
                {
                    Some(ResolveError::AuthorOnly {
                        property: property.to_string(),
                        profile: id.clone(),
                        level: *level,
                        author: authority.author,
                    })
                }
                Some(_) => None,
            };
            if let Some(refusal) = refusal {
                return Err(refusal);
            }
            effective.insert(
                property.to_string(),
                EffectiveProperty {
                    name: property.to_string(),
                    value: value.clone(),
                    origin: Origin::Level(*level),
                },
            );
        }
    }
    Ok(effective.into_values().collect())
}

/// Resolves a run: chooses the profile, looks it up with `lookup`, and applies the overrides.
/// `Ok(None)` when the chosen profile does not exist (the caller reports it with the id).
pub fn resolve<'a>(
    namespace: &str,
    levels: &[(Level, &Values)],
    lookup: impl FnOnce(&ProfileId) -> Option<(Profile, Authority<'a>)>,
) -> Result<Result<Resolution, ProfileId>, ResolveError> {
    let chosen = choose_profile(namespace, levels)?;
    let Some((profile, authority)) = lookup(&chosen.id) else {
        return Ok(Err(chosen.id));
    };
    let properties = effective_properties(&chosen.id, &profile, authority, levels)?;
    Ok(Ok(Resolution {
        profile: chosen,
        properties,
    }))
}

/// Merges `levels` into one map, more specific levels winning (for `?resolved=true`).
pub fn merge(levels: &[(Level, &Values)]) -> Values {
    let mut sorted: Vec<&(Level, &Values)> = levels.iter().collect();
    sorted.sort_by_key(|(level, _)| *level);
    let mut merged = Values::new();
    for (_, values) in sorted {
        merged.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    merged
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_most_specific_level_says_whether_a_start_queues() {
        let on = values(&[(QUEUE_KEY, "true")]);
        let off = values(&[(QUEUE_KEY, "false")]);
        let none = values(&[]);
        let bad = values(&[(QUEUE_KEY, "sometimes")]);
        assert_eq!(queue_wanted(&[(Level::Namespace, &none)]), Ok(None));
        assert_eq!(
            queue_wanted(&[(Level::Runtime, &off), (Level::Namespace, &on)]),
            Ok(Some(false))
        );
        assert_eq!(
            queue_wanted(&[(Level::Instance, &off), (Level::Program, &on)]),
            Ok(Some(true))
        );
        let err = queue_wanted(&[(Level::Runtime, &bad)]).expect_err("bad");
        assert!(err.to_string().contains("system.run.queue"), "{err}");
    }

    use super::*;
    use crate::model::profile::{Keepalive, ProfileStatus, PropertyValue, ProvisionerInfo};

    fn values(pairs: &[(&str, &str)]) -> Values {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn profile(props: &[(&str, &str, bool)]) -> Profile {
        Profile {
            name: "p".into(),
            label: "p".into(),
            description: String::new(),
            scope: Scope::User,
            status: ProfileStatus::Enabled,
            provisioner: ProvisionerInfo {
                name: "local".into(),
                properties: props
                    .iter()
                    .map(|(n, v, e)| PropertyValue {
                        name: n.to_string(),
                        value: v.to_string(),
                        is_editable: *e,
                    })
                    .collect(),
            },
            keepalive: Keepalive::default(),
            timeout: None,
            retry: None,
            queue_runs: None,
            cluster_reuse: false,
            reuse_idle: None,
            pool: None,
            price_per_node_hour: None,
            created: 0,
        }
    }

    /// The provisioner these tests' profiles name: `nodes` anyone may be let change, `workDir`
    /// only the profile's author.
    const SPEC: ebb_spi::ProvisionerSpec = ebb_spi::ProvisionerSpec {
        name: "local",
        label: "Local",
        description: "",
        properties: &[
            ebb_spi::PropertySpec::optional(
                "nodes",
                ebb_spi::PropertyKind::Integer { min: 1, max: 64 },
            ),
            ebb_spi::PropertySpec::optional("workDir", ebb_spi::PropertyKind::Text).author_only(),
        ],
    };

    /// A profile written by `author`.
    fn by(author: Trust) -> Authority<'static> {
        Authority {
            author,
            spec: &SPEC,
        }
    }

    /// A namespace admin's profile.
    fn ns_admin() -> Authority<'static> {
        by(Trust::NamespaceAdmin)
    }

    const ALL: [Level; 6] = [
        Level::Instance,
        Level::Namespace,
        Level::App,
        Level::AppPreferences,
        Level::Program,
        Level::Runtime,
    ];

    #[test]
    fn no_assignment_means_native() {
        let chosen = choose_profile("ns", &[]).expect("ok");
        assert_eq!(
            chosen,
            ChosenProfile {
                id: ProfileId::native(),
                origin: Origin::Default
            }
        );
        let other = values(&[("unrelated", "x")]);
        let chosen = choose_profile("ns", &[(Level::Namespace, &other)]).expect("ok");
        assert_eq!(chosen.id, ProfileId::native());
    }

    /// Each level alone chooses the profile; with all levels set, the most specific wins.
    #[test]
    fn each_level_chooses_and_the_most_specific_wins() {
        let maps: Vec<Values> = ALL
            .iter()
            .map(|l| values(&[(PROFILE_KEY, &format!("SYSTEM:{l:?}"))]))
            .collect();
        for (i, level) in ALL.iter().enumerate() {
            let chosen = choose_profile("ns", &[(*level, &maps[i])]).expect("ok");
            assert_eq!(chosen.id, ProfileId::system(&format!("{level:?}")));
            assert_eq!(chosen.origin, Origin::Level(*level));
            // Every level up to and including this one set: this one wins, in any order.
            let mut upto: Vec<(Level, &Values)> =
                ALL[..=i].iter().copied().zip(maps.iter()).collect();
            upto.reverse();
            assert_eq!(
                choose_profile("ns", &upto).expect("ok").origin,
                Origin::Level(*level)
            );
        }
    }

    #[test]
    fn scoped_names_resolve_in_the_run_namespace() {
        let cases = [
            (
                "SYSTEM:local",
                Level::Namespace,
                Ok(ProfileId::system("local")),
            ),
            (
                "USER:team",
                Level::Program,
                Ok(ProfileId::user("ns", "team")),
            ),
            ("team", Level::Runtime, Ok(ProfileId::user("ns", "team"))),
            (
                "SYSTEM:local",
                Level::Instance,
                Ok(ProfileId::system("local")),
            ),
        ];
        for (value, level, want) in cases {
            let v = values(&[(PROFILE_KEY, value)]);
            assert_eq!(
                choose_profile("ns", &[(level, &v)]).map(|c| c.id),
                want,
                "{value}"
            );
        }
        let bad = [
            ("team", Level::Instance, "must name a SYSTEM profile"),
            ("USER:team", Level::Instance, "must name a SYSTEM profile"),
            ("CLUSTER:x", Level::Namespace, "unknown scope"),
            ("SYSTEM:a b", Level::Runtime, "not a valid name"),
            ("", Level::App, "not a valid name"),
        ];
        for (value, level, fragment) in bad {
            let v = values(&[(PROFILE_KEY, value)]);
            let err = choose_profile("ns", &[(level, &v)])
                .expect_err(value)
                .to_string();
            assert!(err.contains(fragment), "{value}: {err}");
            assert!(err.contains(PROFILE_KEY), "{value}: {err}");
        }
    }

    #[test]
    fn overrides_apply_from_every_level_most_specific_winning() {
        let p = profile(&[("nodes", "3", true), ("workDir", "/w", true)]);
        let id = ProfileId::user("ns", "p");
        let key = format!("{PROPERTY_PREFIX}nodes");
        let maps: Vec<Values> = (0..ALL.len())
            .map(|i| values(&[(&key, &(10 + i).to_string())]))
            .collect();
        for (i, level) in ALL.iter().enumerate() {
            let levels: Vec<(Level, &Values)> =
                ALL[..=i].iter().copied().zip(maps.iter()).rev().collect();
            let eff = effective_properties(&id, &p, ns_admin(), &levels).expect("ok");
            assert_eq!(
                eff,
                vec![
                    EffectiveProperty {
                        name: "nodes".into(),
                        value: (10 + i).to_string(),
                        origin: Origin::Level(*level)
                    },
                    EffectiveProperty {
                        name: "workDir".into(),
                        value: "/w".into(),
                        origin: Origin::Profile
                    },
                ],
                "up to {level:?}"
            );
        }
    }

    #[test]
    fn missing_levels_and_unrelated_keys_leave_the_profile_as_is() {
        let p = profile(&[("nodes", "3", false)]);
        let id = ProfileId::user("ns", "p");
        let unrelated = values(&[("system.profile.propertiesX", "1"), ("nodes", "9")]);
        let eff =
            effective_properties(&id, &p, ns_admin(), &[(Level::Runtime, &unrelated)]).expect("ok");
        assert_eq!(
            eff,
            vec![EffectiveProperty {
                name: "nodes".into(),
                value: "3".into(),
                origin: Origin::Profile
            }]
        );
        assert_eq!(
            effective_properties(&id, &p, ns_admin(), &[])
                .expect("ok")
                .len(),
            1
        );
    }

    #[test]
    fn a_non_editable_override_is_an_error_naming_property_and_profile() {
        let p = profile(&[("nodes", "3", false)]);
        let id = ProfileId::user("ns", "p");
        let key = format!("{PROPERTY_PREFIX}nodes");
        for level in ALL {
            let v = values(&[(&key, "5")]);
            let err = effective_properties(&id, &p, ns_admin(), &[(level, &v)])
                .expect_err("not editable");
            assert_eq!(
                err,
                ResolveError::NotEditable {
                    property: "nodes".into(),
                    profile: id.clone(),
                    level
                }
            );
            let text = err.to_string();
            assert!(
                text.contains("'nodes'") && text.contains("profile 'p'"),
                "{text}"
            );
        }
        // The same value overrides nothing, so it is not refused.
        let same = values(&[(&key, "3")]);
        assert!(effective_properties(&id, &p, ns_admin(), &[(Level::Runtime, &same)]).is_ok());
    }

    #[test]
    fn a_property_the_profile_does_not_set_is_not_overridden() {
        let p = profile(&[("nodes", "3", true)]);
        let id = ProfileId::user("ns", "p");
        let v = values(&[(&format!("{PROPERTY_PREFIX}workDir"), "/x")]);
        for level in ALL {
            let err = effective_properties(&id, &p, by(Trust::InstanceAdmin), &[(level, &v)])
                .expect_err("not in the profile");
            assert_eq!(
                err,
                ResolveError::NotInProfile {
                    property: "workDir".into(),
                    profile: id.clone(),
                    level
                }
            );
            assert!(err.to_string().contains("not set by profile 'p'"), "{err}");
        }
        let empty = values(&[(PROPERTY_PREFIX, "/x")]);
        assert!(matches!(
            effective_properties(&id, &p, ns_admin(), &[(Level::Program, &empty)]),
            Err(ResolveError::EmptyPropertyName { .. })
        ));
    }

    /// An author-only property, editable in the profile, changes only at a level whose
    /// writer is trusted as much as the profile's author; other properties at any level.
    #[test]
    fn an_author_only_property_changes_only_at_a_level_as_trusted_as_the_author() {
        let p = profile(&[("nodes", "3", true), ("workDir", "/w", true)]);
        let id = ProfileId::user("ns", "p");
        let dir = values(&[(&format!("{PROPERTY_PREFIX}workDir"), "/elsewhere")]);
        let nodes = values(&[(&format!("{PROPERTY_PREFIX}nodes"), "5")]);
        let authors = [Trust::Operator, Trust::NamespaceAdmin, Trust::InstanceAdmin];
        for author in authors {
            for level in ALL {
                let got = effective_properties(&id, &p, by(author), &[(level, &dir)]);
                let allowed = level.writer() >= author;
                match (&got, allowed) {
                    (Ok(eff), true) => assert_eq!(eff[1].value, "/elsewhere"),
                    (
                        Err(ResolveError::AuthorOnly {
                            property,
                            author: a,
                            ..
                        }),
                        false,
                    ) => assert_eq!((property.as_str(), *a), ("workDir", author)),
                    _ => panic!("{author:?} at {level:?}: {got:?}"),
                }
                let eff = effective_properties(&id, &p, by(author), &[(level, &nodes)])
                    .expect("nodes are anyone's to change where editable");
                assert_eq!(eff[0].value, "5");
            }
        }
        // The writers, as the rule reads them.
        assert_eq!(Level::Runtime.writer(), Trust::Operator);
        assert_eq!(Level::Program.writer(), Trust::NamespaceAdmin);
        assert_eq!(Level::Instance.writer(), Trust::InstanceAdmin);
        // The profile's own value passes at any level: it changes nothing.
        let same = values(&[(&format!("{PROPERTY_PREFIX}workDir"), "/w")]);
        let by_instance = by(Trust::InstanceAdmin);
        assert!(effective_properties(&id, &p, by_instance, &[(Level::Runtime, &same)]).is_ok());
    }

    #[test]
    fn runtime_arguments_never_refer_to_secure_keys() {
        let refers = values(&[(
            "system.profile.properties.secretAccessKey",
            "${secure(db-password)}",
        )]);
        let err = check_overrides(Level::Runtime, &refers).expect_err("refused");
        assert!(
            matches!(&err, ResolveError::SecretInArguments { key, .. } if key.ends_with("secretAccessKey")),
            "{err:?}"
        );
        // Anywhere in any argument, well formed or not.
        let hidden = values(&[("anything", "x ${secure(k")]);
        assert!(check_overrides(Level::Runtime, &hidden).is_err());
        // An admin's preferences may.
        for level in &ALL[..5] {
            assert_eq!(check_overrides(*level, &refers), Ok(()), "{level:?}");
        }
    }

    #[test]
    fn resolve_combines_choice_lookup_and_overrides() {
        let ns = values(&[
            (PROFILE_KEY, "team"),
            (&format!("{PROPERTY_PREFIX}nodes"), "7"),
        ]);
        let rt = values(&[(&format!("{PROPERTY_PREFIX}workDir"), "/rt")]);
        let levels = [(Level::Namespace, &ns), (Level::Runtime, &rt)];
        let found = resolve("ns", &levels, |id| {
            assert_eq!(id, &ProfileId::user("ns", "team"));
            let p = profile(&[("nodes", "3", true), ("workDir", "/w", true)]);
            Some((p, by(Trust::Operator)))
        })
        .expect("ok")
        .expect("found");
        assert_eq!(found.profile.origin, Origin::Level(Level::Namespace));
        let names: Vec<(&str, &str, Origin)> = found
            .properties
            .iter()
            .map(|p| (p.name.as_str(), p.value.as_str(), p.origin.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("nodes", "7", Origin::Level(Level::Namespace)),
                ("workDir", "/rt", Origin::Level(Level::Runtime))
            ]
        );
        let missing = resolve("ns", &levels, |_| None).expect("ok");
        assert_eq!(missing, Err(ProfileId::user("ns", "team")));
    }

    #[test]
    fn merge_lets_the_more_specific_level_win() {
        let inst = values(&[("a", "1"), ("b", "1")]);
        let ns = values(&[("b", "2"), ("c", "2")]);
        let merged = merge(&[(Level::Namespace, &ns), (Level::Instance, &inst)]);
        assert_eq!(merged, values(&[("a", "1"), ("b", "2"), ("c", "2")]));
    }

    #[test]
    fn origins_serialize_as_level_names() {
        let json = serde_json::to_string(&[
            Origin::Default,
            Origin::Profile,
            Origin::Level(Level::AppPreferences),
        ])
        .expect("serializes");
        assert_eq!(json, r#"["default","profile","appPreferences"]"#);
    }
}
