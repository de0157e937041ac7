//! Runnable examples. The flash-sale demo ([`flash_sale`]) is the main one:
//! a shop server (axum or actix-web) that uses every primitive in a real flow,
//! and a `simulate` mode that fires thousands of buyers at it.

pub mod flash_sale;
