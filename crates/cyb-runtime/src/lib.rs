//! cyb-runtime
