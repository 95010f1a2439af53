//! Usage and cost: `GET /v3/usage` (a namespace's viewers read its usage with `namespace=`;
//! without it, instance admins read every namespace's), and the price table (`GET`, and `PUT`
//! by instance admins).

use crate::api::body::Json;
use crate::api::contract::{Query, Reply, ok};
use crate::api::state::State;
use crate::model::access::{Act, Caller};
use crate::model::price::PriceTable;
use crate::model::usage::{UsageParams, UsageReport};
use crate::service::usage;

pub async fn get_usage(
    state: State,
    caller: Caller,
    params: Query<UsageParams>,
) -> Reply<UsageReport> {
    ok(usage::report(&state.store, &caller.grants, params.0).await?)
}

pub async fn get_prices(state: State) -> Reply<PriceTable> {
    ok(usage::prices(&state.store).await?)
}

pub async fn put_prices(state: State, caller: Caller, body: Json<PriceTable>) -> Reply<PriceTable> {
    let act = Act::new(&caller, "prices.put", None, "prices");
    ok(usage::set_prices(&state.store, act, body.0).await?)
}
