//! Structural-schema defaulting, pruning and validation of custom resources against a
//! CRD version's `openAPIV3Schema`. CEL rules (`x-kubernetes-validations`) and
//! `oneOf`/`anyOf`/`allOf`/`not` are not evaluated.

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::FieldError;

/// Defaults, prunes and validates a whole object in place. `apiVersion`, `kind` and
/// `metadata` are the server's business and left alone.
pub(crate) fn apply(schema: &Value, object: &mut Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(fields) = object.as_object_mut() else {
        errors.push(FieldError::new(
            "<root>",
            "FieldValueTypeInvalid",
            "must be an object".into(),
        ));
        return errors;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let keep_unknown = preserves_unknown(schema);
    add_defaults(schema, fields);
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => check_field(sub, fields, &key, &key, &mut errors),
            None if keep_unknown => {}
            None => {
                fields.remove(&key);
            }
        }
    }
    check_required(schema, fields, "", &mut errors);
    errors
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

fn add_defaults(schema: &Value, fields: &mut Map<String, Value>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, sub) in props {
        if let Some(default) = sub.get("default")
            && !fields.contains_key(key)
        {
            fields.insert(key.clone(), default.clone());
        }
    }
}

fn check_required(
    schema: &Value,
    fields: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !fields.contains_key(name) {
            errors.push(FieldError::new(
                &join(path, name),
                "FieldValueRequired",
                "Required value".into(),
            ));
        }
    }
}

/// A null in a non-nullable field is dropped, as the API server does before defaulting.
fn check_field(
    schema: &Value,
    parent: &mut Map<String, Value>,
    key: &str,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let nullable = schema.get("nullable") == Some(&Value::Bool(true));
    if parent.get(key).is_some_and(Value::is_null) {
        if !nullable {
            parent.remove(key);
        }
        return;
    }
    if let Some(value) = parent.get_mut(key) {
        check(schema, value, path, errors);
    }
}

fn check(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() {
        if schema.get("nullable") != Some(&Value::Bool(true)) {
            errors.push(type_error(path, value, type_name(schema)));
        }
        return;
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(is_integer(value) || value.is_string()) {
            errors.push(type_error(path, value, "integer or string"));
        }
        return;
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => check_object(schema, value, path, errors),
        Some("array") => check_array(schema, value, path, errors),
        Some("string") => check_string(schema, value, path, errors),
        Some("integer") => check_integer(schema, value, path, errors),
        Some("number") => check_number(schema, value, path, errors),
        Some("boolean") if !value.is_boolean() => errors.push(type_error(path, value, "boolean")),
        _ => {}
    }
    check_enum(schema, value, path, errors);
}

fn type_name(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("any")
}

fn check_object(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(fields) = value.as_object_mut() else {
        errors.push(type_error(path, value, "object"));
        return;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keep_unknown = preserves_unknown(schema) || additional == Some(&Value::Bool(true));
    add_defaults(schema, fields);
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        let sub = props
            .and_then(|p| p.get(&key))
            .or(additional.filter(|a| a.is_object()));
        match sub {
            Some(sub) => check_field(sub, fields, &key, &join(path, &key), errors),
            None if keep_unknown => {}
            None => {
                fields.remove(&key);
            }
        }
    }
    check_required(schema, fields, path, errors);
}

fn check_array(schema: &Value, value: &mut Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(items) = value.as_array_mut() else {
        errors.push(type_error(path, value, "array"));
        return;
    };
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errors.push(FieldError::new(
            path,
            "FieldValueTooMany",
            format!("Too many: {}: must have at most {max} items", items.len()),
        ));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        errors.push(FieldError::new(
            path,
            "FieldValueInvalid",
            format!(
                "Invalid value: {}: {path} in body should have at least {min} items",
                items.len()
            ),
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter_mut().enumerate() {
            check(item_schema, item, &format!("{path}[{i}]"), errors);
        }
    }
}

fn check_string(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(text) = value.as_str() else {
        errors.push(type_error(path, value, "string"));
        return;
    };
    let chars = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        errors.push(FieldError::new(
            path,
            "FieldValueTooLong",
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // An uncompilable pattern is the CRD's fault; the API server refuses such CRDs.
        if Regex::new(pattern).is_ok_and(|re| !re.is_match(text)) {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should match '{pattern}'"),
            ));
        }
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

fn check_integer(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if !is_integer(value) {
        errors.push(type_error(path, value, "integer"));
        return;
    }
    let n = value.as_i64().map_or(i128::from(u64::MAX), i128::from);
    let n = value.as_u64().map_or(n, i128::from);
    let range: Option<(i128, i128)> = match schema.get("format").and_then(Value::as_str) {
        Some("int8") => Some((i8::MIN.into(), i8::MAX.into())),
        Some("int16") => Some((i16::MIN.into(), i16::MAX.into())),
        Some("int32") => Some((i32::MIN.into(), i32::MAX.into())),
        Some("int64") => Some((i64::MIN.into(), i64::MAX.into())),
        Some("uint8") => Some((0, u8::MAX.into())),
        Some("uint16") => Some((0, u16::MAX.into())),
        Some("uint32") => Some((0, u32::MAX.into())),
        Some("uint64") => Some((0, u64::MAX.into())),
        _ => None,
    };
    if let Some((low, high)) = range {
        bound(path, value, n as f64, low as f64, high as f64, errors);
    }
    check_bounds(schema, value, n as f64, path, errors);
}

fn check_number(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value.as_f64() {
        Some(n) => check_bounds(schema, value, n, path, errors),
        None => errors.push(type_error(path, value, "number")),
    }
}

fn bound(path: &str, value: &Value, n: f64, low: f64, high: f64, errors: &mut Vec<FieldError>) {
    if n < low {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be greater than or equal to {low}"),
        ));
    } else if n > high {
        errors.push(invalid(
            path,
            value,
            format!("{path} in body should be less than or equal to {high}"),
        ));
    }
}

fn check_bounds(schema: &Value, value: &Value, n: f64, path: &str, errors: &mut Vec<FieldError>) {
    let exclusive = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        if exclusive("exclusiveMinimum") && n <= min {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be greater than {min}"),
            ));
        } else if n < min {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be greater than or equal to {min}"),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        if exclusive("exclusiveMaximum") && n >= max {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be less than {max}"),
            ));
        } else if n > max {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be less than or equal to {max}"),
            ));
        }
    }
}

fn check_enum(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if !allowed.contains(value) {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(FieldError::new(
            path,
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        ));
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError::new(
        path,
        "FieldValueInvalid",
        format!("Invalid value: {value}: {detail}"),
    )
}

fn type_error(path: &str, value: &Value, expected: &str) -> FieldError {
    let actual = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    FieldError::new(
        path,
        "FieldValueTypeInvalid",
        format!(
            "Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
        ),
    )
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": 10},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "env": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "note": {"type": "string", "nullable": true},
                        "ratio": {"type": "number", "minimum": 0.5}
                    }
                }
            }
        })
    }

    fn run(mut object: Value) -> (Value, Vec<String>) {
        let errors = apply(&schema(), &mut object);
        (object, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn accepts_prunes_and_defaults() {
        let (object, errors) = run(json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "extra": 1},
            "spec": {"size": 3, "unknown": true, "env": {"A": "b"}, "free": {"any": [1]},
                     "port": "http", "note": null, "tags": ["x"]},
            "stray": 1
        }));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(object["spec"].get("unknown"), None);
        assert_eq!(object.get("stray"), None);
        assert_eq!(object["metadata"]["extra"], 1);
        assert_eq!(object["spec"]["mode"], "a");
        assert_eq!(object["spec"]["free"]["any"], json!([1]));
        assert_eq!(object["spec"]["note"], Value::Null);
    }

    #[test]
    fn reports_each_rule_with_its_path() {
        let (_, errors) = run(json!({"spec": {
            "size": 4294967296u64, "mode": "c", "name": "ABCDEFG", "tags": ["a", "b", "c"],
            "env": {"A": 1}, "port": true, "ratio": 0.1
        }}));
        let expected = [
            "spec.size: Invalid value: 4294967296: spec.size in body should be less than or equal to 4294967295",
            "spec.size: Invalid value: 4294967296: spec.size in body should be less than or equal to 10",
            "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
            "spec.tags: Too many: 3: must have at most 2 items",
            "spec.env.A: Invalid value: \"integer\": spec.env.A in body must be of type string: \"integer\"",
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer or string: \"boolean\"",
            "spec.ratio: Invalid value: 0.1: spec.ratio in body should be greater than or equal to 0.5",
        ];
        for line in expected {
            assert!(
                errors.iter().any(|e| e == line),
                "missing {line:?} in {errors:#?}"
            );
        }
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    }

    #[test]
    fn missing_required_and_wrong_types() {
        let (_, errors) = run(json!({"spec": {"name": 5, "tags": "x"}}));
        assert!(
            errors.contains(&"spec.size: Required value".to_string()),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.name: Invalid value: \"integer\""))
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.tags: Invalid value: \"string\""))
        );
    }
}
