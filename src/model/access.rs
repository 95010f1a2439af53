//! Who may do what: roles per namespace, the grants of a token, the right each route needs,
//! and the one rule that decides ([`decide`]). Pure: the API applies the decision, the
//! service keeps the tokens.
//!
//! A namespace the caller has no role in does not exist for it: the decision is
//! [`Decision::Hidden`], which the API answers exactly as it answers a namespace that does not
//! exist, so a token cannot even learn which namespaces there are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::invalid::Invalid;
use crate::model::names;

/// What a token may do in one namespace; each role has every right of the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads what is in the namespace: runs, their events and logs, profiles, apps,
    /// preferences, templates, the names and metadata of secure keys. Never secret data.
    Viewer,
    /// Also starts and stops runs, extends and deprovisions their clusters, runs cluster
    /// operations.
    Operator,
    /// Also changes apps, profiles, preferences, templates and secure keys of the namespace,
    /// and makes and revokes tokens for it.
    Admin,
}

display_as_serde!(Role);

/// What a token may do: a role in some namespaces, or everything (instance admin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grants {
    /// Everything the roles give in every namespace, and also SYSTEM profiles and templates,
    /// instance preferences, namespaces, the janitor and the servers.
    #[serde(default)]
    pub instance_admin: bool,
    /// A role per namespace.
    #[serde(default)]
    pub namespaces: BTreeMap<String, Role>,
    /// Reads `GET /metrics`, whose figures name every namespace (a scraper's token); only an
    /// instance admin gives it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metrics: bool,
}

impl Grants {
    /// Every right.
    pub fn instance_admin() -> Grants {
        Grants {
            instance_admin: true,
            namespaces: BTreeMap::new(),
            metrics: false,
        }
    }

    /// The role these grants give in namespace `ns`: an instance admin is admin everywhere.
    pub fn role_in(&self, ns: &str) -> Option<Role> {
        if self.instance_admin {
            return Some(Role::Admin);
        }
        self.namespaces.get(ns).copied()
    }

    /// Whether namespace `ns` exists for these grants.
    pub fn sees(&self, ns: &str) -> bool {
        self.role_in(ns).is_some()
    }

    /// Whether these grants may hand out `other`: an instance admin any grants; a
    /// namespace admin only roles in the namespaces it administers.
    pub fn may_grant(&self, other: &Grants) -> Result<(), String> {
        if self.instance_admin {
            return Ok(());
        }
        if other.instance_admin {
            return Err("only an instance admin can make instance-admin tokens".into());
        }
        if other.metrics {
            return Err(
                "only an instance admin can make metrics tokens: the metrics show every namespace"
                    .into(),
            );
        }
        match other
            .namespaces
            .keys()
            .find(|ns| self.role_in(ns) != Some(Role::Admin))
        {
            Some(ns) => Err(format!(
                "a role in namespace '{ns}' can only be given by an admin of it"
            )),
            None => Ok(()),
        }
    }
}

/// How far the server trusts whoever wrote something, least first. What a writer made (a
/// profile, a template, a preference, a run's arguments) may steer only what that writer's
/// role may decide: a value set at a lower trust never moves what a higher one fixed, and
/// only what instance admins wrote runs on the server's own host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Trust {
    /// An operator (or anything that starts runs for one): runtime arguments.
    Operator,
    /// A namespace admin: the namespace's profiles, templates, apps and preferences.
    NamespaceAdmin,
    /// An instance admin: SYSTEM profiles and templates, instance preferences, and whatever
    /// else one wrote.
    InstanceAdmin,
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Trust::Operator => "operator",
            Trust::NamespaceAdmin => "namespace admin",
            Trust::InstanceAdmin => "instance admin",
        })
    }
}

impl Trust {
    /// What is trusted least among the writers that may change a USER record whose writer
    /// is not recorded: a namespace admin.
    pub fn unrecorded() -> Trust {
        Trust::NamespaceAdmin
    }
}

/// Who a request comes from: the name the audit records, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub grants: Grants,
    /// Set for a run's own program (its `EBB_RUN_TOKEN`): it may only resize that run's
    /// cluster, and its grants are none.
    pub run: Option<RunScope>,
}

/// The run a run token acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunScope {
    pub namespace: String,
    pub run: String,
}

impl Caller {
    /// The caller of a server started with `--no-auth`: every right, under this name.
    pub const ANONYMOUS: &str = "anonymous";
    /// The caller holding the token given to `ebb serve` with `--token`/`EBB_TOKEN`.
    pub const SERVE_TOKEN: &str = "serve-token";

    pub fn instance_admin(name: &str) -> Caller {
        Caller {
            name: name.to_string(),
            grants: Grants::instance_admin(),
            run: None,
        }
    }

    /// The trust what this caller writes carries: an instance admin's, else (whatever its
    /// role, as only admins write records) a namespace admin's.
    pub fn trust(&self) -> Trust {
        if self.grants.instance_admin {
            Trust::InstanceAdmin
        } else {
            Trust::NamespaceAdmin
        }
    }
}

/// The right a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing, not even a token (health).
    Public,
    /// Any valid token: what every token may read (provisioners, SYSTEM profiles and
    /// templates, instance preferences), and lists the handler filters.
    Token,
    /// An admin role in some namespace, or instance admin (token management; what may be
    /// granted is checked against the body).
    AnyAdmin,
    /// At least this role in the request's namespace: the path's `{ns}`, else the
    /// `namespace` query parameter. Without a namespace it is an instance-admin right.
    Namespace(Role),
    /// Instance admin.
    Instance,
    /// Instance admin, or a token given `metrics` (a scraper's): what shows every namespace's
    /// figures.
    Metrics,
}

/// What [`decide`] says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The namespace does not exist for the caller: answer as if it did not exist.
    Hidden(String),
    /// The caller sees the namespace (or needs no namespace) but lacks the right: why.
    Forbidden(String),
}

/// Whether `grants` may do what needs `need`, in namespace `ns` when the request names one.
pub fn decide(need: Need, grants: &Grants, ns: Option<&str>) -> Decision {
    let instance = || {
        if grants.instance_admin {
            Decision::Allow
        } else {
            Decision::Forbidden("this needs an instance-admin token".into())
        }
    };
    match need {
        Need::Public | Need::Token => Decision::Allow,
        Need::AnyAdmin => {
            if grants.instance_admin || grants.namespaces.values().any(|r| *r == Role::Admin) {
                Decision::Allow
            } else {
                Decision::Forbidden("this needs an admin role in a namespace".into())
            }
        }
        Need::Instance => instance(),
        Need::Metrics => {
            if grants.instance_admin || grants.metrics {
                Decision::Allow
            } else {
                Decision::Forbidden(
                    "this needs an instance-admin token or a metrics token (ebb token create NAME --metrics)"
                        .into(),
                )
            }
        }
        Need::Namespace(needed) => match ns {
            None => instance(),
            Some(ns) => match grants.role_in(ns) {
                None => Decision::Hidden(ns.to_string()),
                Some(role) if role >= needed => Decision::Allow,
                Some(role) => Decision::Forbidden(format!(
                    "this needs the {needed} role in namespace '{ns}'; the token is {role} there"
                )),
            },
        },
    }
}

/// The most namespaces one token may name.
pub const MAX_TOKEN_NAMESPACES: usize = 1_000;
/// The longest a token may live.
pub const MAX_TOKEN_LIFETIME: std::time::Duration =
    std::time::Duration::from_secs(10 * 366 * 24 * 3600);

/// The body of `POST /v3/tokens`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(example = serde_json::json!({"name": "ci", "namespaces": {"default": "operator"}, "expiresIn": "30d"}))]
pub struct TokenSpec {
    #[schemars(schema_with = "names::schema")]
    pub name: String,
    #[serde(default)]
    pub namespaces: BTreeMap<String, Role>,
    #[serde(default)]
    pub instance_admin: bool,
    /// Reads `GET /metrics` (a scraper's token): only an instance admin makes one.
    #[serde(default)]
    pub metrics: bool,
    /// How long the token lives (`30d`, `12h`); for ever when left out.
    #[serde(default)]
    pub expires_in: Option<String>,
}

impl TokenSpec {
    /// Checks the spec: the name, each namespace's name, that it grants something, and its
    /// lifetime. Returns the grants and the lifetime in seconds.
    pub fn validate(&self) -> Result<(Grants, Option<u64>), Invalid> {
        names::check("name", &self.name)?;
        if [Caller::ANONYMOUS, Caller::SERVE_TOKEN].contains(&self.name.as_str()) {
            return Err(Invalid::new(
                "name",
                format!("'{}' is reserved; choose another name", self.name),
            ));
        }
        if self.namespaces.len() > MAX_TOKEN_NAMESPACES {
            return Err(Invalid::new(
                "namespaces",
                format!("at most {MAX_TOKEN_NAMESPACES} namespaces"),
            ));
        }
        for ns in self.namespaces.keys() {
            names::check("namespaces", ns)?;
        }
        if self.namespaces.is_empty() && !self.instance_admin && !self.metrics {
            return Err(Invalid::new(
                "namespaces",
                "give the token a role in at least one namespace, make it an instance admin, or let it read the metrics",
            ));
        }
        let lifetime = match &self.expires_in {
            None => None,
            Some(text) => {
                let d = ebb_spi::parse_duration(text).map_err(|e| Invalid::new("expiresIn", e))?;
                if d.is_zero() || d > MAX_TOKEN_LIFETIME {
                    return Err(Invalid::new(
                        "expiresIn",
                        "must be more than 0 and at most 10 years",
                    ));
                }
                Some(d.as_secs().max(1))
            }
        };
        Ok((
            Grants {
                instance_admin: self.instance_admin,
                namespaces: self.namespaces.clone(),
                metrics: self.metrics,
            },
            lifetime,
        ))
    }
}

/// A token as the store keeps it: its grants and the SHA-256 of its secret, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    pub name: String,
    /// The hex SHA-256 of the secret.
    pub hash: String,
    pub grants: Grants,
    /// Epoch seconds.
    pub created: u64,
    /// The name of the token that made it (`ebb serve` for the first one).
    pub created_by: String,
    /// Epoch seconds after which it no longer works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    /// The access generation it was sealed at: it works only while that is the
    /// installation's (see `service::tokens::generation`), so a revoked record written back
    /// into the store stays revoked.
    #[serde(default)]
    pub generation: u64,
    /// Stores of schema version 2 only: the installation's signature over the rest
    /// ([`TokenRecord::signed`]), checked once when the store's records are sealed. Records
    /// are sealed whole since (`store::seal`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
}

impl TokenRecord {
    /// What its schema 2 signature covers: every field but the signature.
    pub fn signed(&self) -> Vec<u8> {
        let fields = (
            &self.name,
            &self.hash,
            &self.grants,
            self.created,
            &self.created_by,
            self.expires,
        );
        serde_json::to_vec(&fields).expect("plain data serializes")
    }

    /// Whether the token still works at `now`.
    pub fn live(&self, now: u64) -> bool {
        self.expires.is_none_or(|t| now < t)
    }

    /// What the API shows of it: everything but the hash.
    pub fn view(&self) -> TokenView {
        TokenView {
            name: self.name.clone(),
            grants: self.grants.clone(),
            created: self.created,
            created_by: self.created_by.clone(),
            expires: self.expires,
            token: None,
        }
    }
}

/// A signed-in browser's session, as the store keeps it under `<token>/<hash of its
/// secret>`: the token it acts as, bound to that token's secret (a token made again under
/// the same name does not inherit it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The token's name.
    pub token: String,
    /// The hex SHA-256 of the token's secret when the session began.
    pub token_hash: String,
    /// Epoch seconds.
    pub created: u64,
    /// Epoch seconds after which it no longer works.
    pub expires: u64,
    /// The access generation it was sealed at (see [`TokenRecord::generation`]).
    #[serde(default)]
    pub generation: u64,
    /// Stores of schema version 2 only: the installation's signature over the rest, with the
    /// key it is kept under ([`SessionRecord::signed`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
}

impl SessionRecord {
    /// What its schema 2 signature covers: its key in the store and every field but the
    /// signature.
    pub fn signed(&self, key: &str) -> Vec<u8> {
        let fields = (
            key,
            &self.token,
            &self.token_hash,
            self.created,
            self.expires,
        );
        serde_json::to_vec(&fields).expect("plain data serializes")
    }
}

/// A token as the API shows it; `token`, the secret, only in the answer that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    pub name: String,
    #[serde(flatten)]
    pub grants: Grants,
    pub created: u64,
    pub created_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The file in the data dir that `ebb serve` writes the first token to, and client commands
/// read when given no token.
pub const FIRST_TOKEN_FILE: &str = "admin.token";

/// The actor of what the server does on its own.
pub const SERVER_ACTOR: &str = "ebb serve";

/// A change someone asked for: who (a token's name), what, to which thing, in which
/// namespace. The service records it in the same write as the change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Act {
    /// The name of the token that asked.
    pub actor: String,
    /// What was done: `profile.put`, `run.stop`, `token.revoke`...
    pub action: String,
    /// The namespace changed; none for instance-wide things.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// What it was done to: `USER:team-a:spark`, a run id, a token's name...
    pub target: String,
}

impl Act {
    /// `caller` does `action` to `target`, in namespace `namespace` if any.
    pub fn new(caller: &Caller, action: &str, namespace: Option<&str>, target: &str) -> Act {
        Act {
            actor: caller.name.clone(),
            action: action.to_string(),
            namespace: namespace.map(str::to_string),
            target: target.to_string(),
        }
    }

    /// What the server does on its own: the first token.
    pub fn by_server(action: &str, target: &str) -> Act {
        Act {
            actor: SERVER_ACTOR.into(),
            action: action.to_string(),
            namespace: None,
            target: target.to_string(),
        }
    }
}

/// One change in the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Orders entries; pass the last one seen as `before` for the next (older) page.
    pub seq: u64,
    /// Epoch seconds, with milliseconds.
    pub time: f64,
    #[serde(flatten)]
    pub act: Act,
}

/// Whether a run's program, and the scripts of its services, run on the server's own host:
/// every provisioner but `hosts`, unless the profile reaches its nodes over SSH
/// (`sshUser`). Such a run executes its app's commands with the server's rights.
pub fn runs_on_host(provisioner: &str, properties: &BTreeMap<String, String>) -> bool {
    provisioner != "hosts" && !properties.contains_key(ebb_spi::SSH_USER.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(pairs: &[(&str, Role)]) -> Grants {
        Grants {
            instance_admin: false,
            namespaces: pairs.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
            metrics: false,
        }
    }

    #[test]
    fn every_need_against_every_role() {
        use Decision::*;
        let table: &[(Need, Option<Role>, bool)] = &[
            // (need, role in "a" (None: no role), allowed)
            (Need::Namespace(Role::Viewer), Some(Role::Viewer), true),
            (Need::Namespace(Role::Operator), Some(Role::Viewer), false),
            (Need::Namespace(Role::Operator), Some(Role::Operator), true),
            (Need::Namespace(Role::Admin), Some(Role::Operator), false),
            (Need::Namespace(Role::Admin), Some(Role::Admin), true),
            (Need::Instance, Some(Role::Admin), false),
            (Need::AnyAdmin, Some(Role::Operator), false),
            (Need::AnyAdmin, Some(Role::Admin), true),
            (Need::Token, Some(Role::Viewer), true),
            (Need::Public, None, true),
            (Need::Token, None, true),
            // Every namespace's figures: not for a namespace's admin.
            (Need::Metrics, Some(Role::Admin), false),
            (Need::Metrics, None, false),
        ];
        for (need, role, allowed) in table {
            let g = match role {
                Some(r) => grants(&[("a", *r)]),
                None => Grants::default(),
            };
            let d = decide(*need, &g, Some("a"));
            assert_eq!(d == Allow, *allowed, "{need:?} with {role:?}: {d:?}");
        }
        // No role at all in the namespace: it does not exist.
        let d = decide(
            Need::Namespace(Role::Viewer),
            &grants(&[("b", Role::Admin)]),
            Some("a"),
        );
        assert_eq!(d, Hidden("a".into()));
        // A namespace need without a namespace is an instance need.
        let d = decide(
            Need::Namespace(Role::Viewer),
            &grants(&[("a", Role::Admin)]),
            None,
        );
        assert!(matches!(d, Forbidden(_)));
        // A scraper's token reads the metrics, and nothing an instance admin may.
        let scraper = Grants {
            metrics: true,
            ..Grants::default()
        };
        assert_eq!(decide(Need::Metrics, &scraper, None), Allow);
        assert!(matches!(
            decide(Need::Instance, &scraper, None),
            Forbidden(_)
        ));
        assert_eq!(
            decide(Need::Namespace(Role::Viewer), &scraper, Some("a")),
            Hidden("a".into())
        );
        assert!(grants(&[("a", Role::Admin)]).may_grant(&scraper).is_err());
        let all = Grants::instance_admin();
        for need in [
            Need::Metrics,
            Need::Instance,
            Need::AnyAdmin,
            Need::Namespace(Role::Admin),
            Need::Token,
        ] {
            assert_eq!(decide(need, &all, Some("anything")), Allow);
        }
    }

    #[test]
    fn a_namespace_admin_grants_only_in_its_namespaces() {
        let admin_a = grants(&[("a", Role::Admin), ("b", Role::Operator)]);
        assert!(admin_a.may_grant(&grants(&[("a", Role::Operator)])).is_ok());
        let err = admin_a
            .may_grant(&grants(&[("a", Role::Viewer), ("b", Role::Viewer)]))
            .expect_err("b is not administered");
        assert!(err.contains("'b'"), "{err}");
        assert!(admin_a.may_grant(&Grants::instance_admin()).is_err());
        assert!(
            Grants::instance_admin()
                .may_grant(&Grants::instance_admin())
                .is_ok()
        );
    }

    #[test]
    fn a_token_spec_is_checked() {
        let spec =
            |json: serde_json::Value| -> TokenSpec { serde_json::from_value(json).expect("spec") };
        let ok = spec(
            serde_json::json!({"name": "ci", "namespaces": {"a": "operator"}, "expiresIn": "1h"}),
        );
        let (g, life) = ok.validate().expect("valid");
        assert_eq!(g.role_in("a"), Some(Role::Operator));
        assert_eq!(life, Some(3600));
        for (bad, field) in [
            (serde_json::json!({"name": "ci"}), "namespaces"),
            (
                serde_json::json!({"name": "a b", "instanceAdmin": true}),
                "name",
            ),
            (
                serde_json::json!({"name": "anonymous", "instanceAdmin": true}),
                "name",
            ),
            (
                serde_json::json!({"name": "x", "namespaces": {"a/b": "viewer"}}),
                "namespaces",
            ),
            (
                serde_json::json!({"name": "x", "instanceAdmin": true, "expiresIn": "0s"}),
                "expiresIn",
            ),
            (
                serde_json::json!({"name": "x", "instanceAdmin": true, "expiresIn": "99999d"}),
                "expiresIn",
            ),
        ] {
            let err = spec(bad.clone()).validate().expect_err(&bad.to_string());
            assert_eq!(err.field, field, "{bad}");
        }
        assert!(
            serde_json::from_value::<TokenSpec>(
                serde_json::json!({"name": "x", "namespaces": {"a": "owner"}})
            )
            .is_err()
        );
    }

    #[test]
    fn programs_run_on_the_host_unless_nodes_are_reached_over_ssh() {
        let none = BTreeMap::new();
        let ssh: BTreeMap<String, String> = [("sshUser".to_string(), "ebb".to_string())].into();
        for p in ["native", "local", "sim", "aws-ec2", "gcp-compute"] {
            assert!(runs_on_host(p, &none), "{p}");
        }
        assert!(!runs_on_host("aws-ec2", &ssh));
        assert!(!runs_on_host("hosts", &none));
    }

    #[test]
    fn expiry() {
        let mut t = TokenRecord {
            name: "t".into(),
            hash: String::new(),
            grants: Grants::default(),
            created: 0,
            created_by: "x".into(),
            expires: Some(10),
            generation: 0,
            signature: String::new(),
        };
        assert!(t.live(9));
        assert!(!t.live(10));
        t.expires = None;
        assert!(t.live(u64::MAX));
    }
}
