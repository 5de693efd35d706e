//! Importers: contract files from documents written for other tools.
//!
//! An importer is a pure function from a document's text to contract files (relative to the
//! contract directory) plus an account of everything it could not carry over (`unsupported`)
//! and everything it had to change to make the result valid (`adapted`). Nothing is dropped
//! without a note naming its JSON pointer.

pub mod asyncapi;
