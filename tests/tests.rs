//! One integration-test binary (so the suite links once); each tool has a module.

mod analyze;
mod architecture;
mod cap;
mod chunked;
mod chunked_import;
mod docs;
mod engine;
mod faults;
mod fit;
mod gen;
mod hostile;
mod import;
mod merge;
mod mock;
mod nat;
mod pipe;
mod plot;
mod props;
mod real_data;
mod replay;
mod report;
mod roots;
mod scale;
mod shard;
mod sweep;
mod util;
