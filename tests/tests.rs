//! One integration-test binary (so the suite links once); each tool has a module.

mod pipe;
mod scale;
mod util;
