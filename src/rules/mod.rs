//! Pure decisions over plain data, no IO: profile resolution ([`resolve`]), the layout
//! [`solver`], cluster operation [`plan`]s and the per-resource lifecycle, the run
//! [`lifecycle`], and cluster [`resize`]s.
pub mod lifecycle;
pub mod plan;
pub mod resize;
pub mod resolve;
pub mod solver;
