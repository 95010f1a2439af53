//! Routes of profiles (SYSTEM and per namespace): CRUD, status, usage and assignments.

use actix_web::{FromRequest, HttpRequest};

use crate::api::body::Json;
use crate::api::contract::{Query, Reply, ok};
use crate::api::error::ApiError;
use crate::api::state::State;
use crate::api::templates::ListQuery;
use crate::model::access::{Act, Caller};
use crate::model::preference::Assignment;
use crate::model::profile::{Profile, ProfileId, ProfileSpec, ProfileStatus, Scope};
use crate::model::view::Usage;
use crate::service::profiles;

/// The profile a path names: `/v3/profiles/{name}` (SYSTEM) or
/// `/v3/namespaces/{ns}/profiles/{name}` (USER).
#[derive(Debug)]
pub struct ProfilePath(pub ProfileId);

impl FromRequest for ProfilePath {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let info = req.match_info();
        let name = info.get("name").unwrap_or_default();
        std::future::ready(Ok(ProfilePath(match info.get("ns") {
            Some(ns) => ProfileId::user(ns, name),
            None => ProfileId::system(name),
        })))
    }
}

pub async fn list_profiles(
    state: State,
    query: Query<ListQuery>,
    req: HttpRequest,
) -> Reply<Vec<Profile>> {
    let include_system = query.0.include_system.0;
    let ns = req.match_info().get("ns").map(str::to_string);
    ok(profiles::list(&state.store, ns, include_system).await?)
}

pub async fn get_profile(state: State, id: ProfilePath) -> Reply<Profile> {
    ok(profiles::get(&state.store, id.0).await?)
}

/// What `caller` does to profile `id`: a USER profile's changes are its namespace's.
pub fn act(caller: &Caller, action: &str, id: &ProfileId) -> Act {
    let ns = (id.scope == Scope::User).then_some(id.namespace.as_str());
    Act::new(caller, action, ns, &id.to_string())
}

pub async fn put_profile(
    state: State,
    caller: Caller,
    id: ProfilePath,
    body: Json<ProfileSpec>,
) -> Reply<Profile> {
    let act = (act(&caller, "profile.put", &id.0), caller.trust());
    ok(profiles::put(&state.store, &state.registry, act, id.0, body.0).await?)
}

pub async fn delete_profile(state: State, caller: Caller, id: ProfilePath) -> Reply<Profile> {
    let act = act(&caller, "profile.delete", &id.0);
    ok(profiles::delete(&state.store, act, id.0).await?)
}

pub async fn profile_status(state: State, id: ProfilePath) -> Reply<ProfileStatus> {
    ok(profiles::get(&state.store, id.0).await?.status)
}

pub async fn enable_profile(state: State, caller: Caller, id: ProfilePath) -> Reply<Profile> {
    let act = act(&caller, "profile.enable", &id.0);
    ok(profiles::set_status(&state.store, act, id.0, ProfileStatus::Enabled).await?)
}

pub async fn disable_profile(state: State, caller: Caller, id: ProfilePath) -> Reply<Profile> {
    let act = act(&caller, "profile.disable", &id.0);
    ok(profiles::set_status(&state.store, act, id.0, ProfileStatus::Disabled).await?)
}

pub async fn profile_usage(state: State, id: ProfilePath) -> Reply<Usage> {
    ok(profiles::usage(&state.runtime, id.0).await?)
}

pub async fn profile_pool(state: State, id: ProfilePath) -> Reply<crate::model::view::PoolView> {
    ok(crate::service::starts::pool::view(&state.runtime, id.0).await?)
}

pub async fn profile_assignments(state: State, id: ProfilePath) -> Reply<Vec<Assignment>> {
    ok(profiles::assignments(&state.runtime, id.0).await?)
}

impl crate::api::contract::Takes for ProfilePath {}
