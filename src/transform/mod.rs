//! The trace transforms: each turns records into records.

pub mod cap;
pub mod delta;
pub mod roots;
pub mod sample;
pub mod scale;
