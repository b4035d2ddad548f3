//! cyb-format
