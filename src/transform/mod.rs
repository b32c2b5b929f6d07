//! The trace transforms: each turns records into records.

pub mod cap;
pub mod roots;
pub mod scale;
