//! The request id of a run that no caller gave one (a job run): made as `/fn` makes one
//! for a call that came without (the gateway's `proxy::headers::call_id`). What a valid
//! id is lives in `sless_api::is_valid_request_id`.

/// A new random id: 32 hex digits.
pub fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn new_ids_are_valid_and_differ() {
        let (a, b) = (super::new_request_id(), super::new_request_id());
        assert!(sless_api::is_valid_request_id(&a));
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
