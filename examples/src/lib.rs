//! Runnable examples. The flash-sale demo ([`flash_sale`]) is the main one:
//! a shop server (axum or actix-web) that uses every primitive in a real flow,
//! and a `simulate` mode that fires thousands of buyers at it. The
//! [`minimal`] services are the smallest use of each adapter.

pub mod flash_sale;
pub mod minimal;
