//! Pure decisions.
pub mod lifecycle;
pub mod plan;
pub mod resize;
pub mod resolve;
pub mod solver;
