//! Search by words and by meaning, shared by long-term memory and knowledge bases: the terms
//! full-text search indexes ([`terms`]), vectors compared in memory ([`vectors`]), and the two
//! rankings merged ([`fusion`]).

pub mod fusion;
pub mod terms;
pub mod vectors;
