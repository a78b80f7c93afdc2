//! The text exposition of metric families registered by one function: what the endpoint
//! serves, and what each component's unit tests read back.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The OpenMetrics text of a registry that `register` fills.
pub fn text_of(register: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::default();
    register(&mut registry);
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}
