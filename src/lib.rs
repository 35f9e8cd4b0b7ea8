//! etch
