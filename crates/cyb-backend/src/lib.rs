//! cyb-backend
