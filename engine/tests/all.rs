//! Integration tests of the engine library against the real `paddock` binary (the sandbox
//! zygote is that binary re-executed).

mod suite;
