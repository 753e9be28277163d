//! What the resources share: the configured client, schema helpers, error reports and
//! the code packing.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sless_client::archive;
use sless_client::client::{Client, ClientError, Kind};
use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Description};
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

/// How often waits poll the API (the spec asks clients to poll every few seconds; one
/// keeps `apply` snappy on a local platform and is still cheap).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default of `wait_timeout_sec`: a first Go or npm build can take minutes.
pub const DEFAULT_WAIT_SEC: i64 = 900;

/// The client, set by `configure`; resources are made before it runs.
pub type Shared = Arc<RwLock<Option<Client>>>;

pub fn client(shared: &Shared, diags: &mut Diagnostics) -> Option<Client> {
    let client = shared.read().ok().and_then(|c| c.clone());
    if client.is_none() {
        diags.root_error_short("the sless provider is not configured");
    }
    client
}

pub fn is_not_found(error: &ClientError) -> bool {
    error.status() == Some(404)
}

/// An API failure as a diagnostic, with the fix for the usual causes.
pub fn report(diags: &mut Diagnostics, summary: String, error: &ClientError) {
    let detail = match error.status() {
        Some(401) => format!(
            "the token was refused: {error}; get a new one with `sless token` and set it as \
             the provider's token or SLESS_API_TOKEN"
        ),
        Some(403) => format!(
            "the token may not act on this namespace: {error}; a token acts only on the \
             namespace of its sub, unless it is an admin token"
        ),
        _ => error.to_string(),
    };
    diags.root_error(summary, detail);
}

pub fn attribute(
    attr_type: AttributeType,
    constraint: AttributeConstraint,
    description: &str,
) -> Attribute {
    Attribute {
        attr_type,
        description: Description::plain(description),
        constraint,
        ..Default::default()
    }
}

pub fn block(description: &str, attributes: HashMap<String, Attribute>) -> Block {
    Block {
        description: Description::plain(description),
        attributes,
        ..Default::default()
    }
}

/// The code of a resource: a folder zipped with the CLI's rules, or a ready zip.
pub struct Code {
    pub zip: Vec<u8>,
    pub digest: String,
}

/// Packs `source_dir` or reads `source_zip`; `Ok(None)` when neither is set.
pub fn load_code(
    source_dir: &Value<String>,
    source_zip: &Value<String>,
) -> Result<Option<Code>, (&'static str, String)> {
    if let Value::Value(dir) = source_dir {
        let packed =
            archive::zip_folder(Path::new(dir)).map_err(|e| ("source_dir", format!("{e:#}")))?;
        return Ok(Some(Code {
            zip: packed.zip,
            digest: packed.digest,
        }));
    }
    if let Value::Value(path) = source_zip {
        let zip =
            std::fs::read(path).map_err(|e| ("source_zip", format!("reading {path}: {e}")))?;
        let digest = zip_digest(&zip).map_err(|e| ("source_zip", format!("{path}: {e}")))?;
        return Ok(Some(Code { zip, digest }));
    }
    Ok(None)
}

/// The code to upload at apply, checked against the plan; fills `source_hash` when the
/// plan could not know it (a source_dir computed by another resource).
pub fn planned_code(
    diags: &mut Diagnostics,
    source_dir: &Value<String>,
    source_zip: &Value<String>,
    source_hash: &mut Value<String>,
) -> Option<Code> {
    let code = match load_code(source_dir, source_zip) {
        Ok(code) => code?,
        Err((attribute, message)) => {
            diags.error_short(message, AttributePath::new(attribute));
            return None;
        }
    };
    match source_hash {
        Value::Value(planned) if *planned != code.digest => {
            // The state would name other code than the server runs.
            diags.root_error_short(
                "the code changed between plan and apply: run terraform apply again",
            );
            return None;
        }
        _ => *source_hash = Value::Value(code.digest.clone()),
    }
    Some(code)
}

/// The content digest of a zip's files, the same as for a folder of those files.
fn zip_digest(zip: &[u8]) -> anyhow::Result<String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))?;
    let mut files = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index)?;
        if entry.is_dir() {
            continue;
        }
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content)?;
        files.push((entry.name().to_string(), content));
    }
    Ok(archive::content_digest(files.iter().map(
        |(name, content)| (name.as_str(), content.as_slice()),
    )))
}

/// The planned `source_hash`: known when the source is, unknown while it is not.
pub fn plan_source_hash(
    diags: &mut Diagnostics,
    source_dir: &Value<String>,
    source_zip: &Value<String>,
) -> Value<String> {
    if source_dir.is_unknown() || source_zip.is_unknown() {
        return Value::Unknown;
    }
    if source_dir.is_value() && source_zip.is_value() {
        diags.error_short(
            "set source_dir or source_zip, not both",
            AttributePath::new("source_zip"),
        );
        return Value::Unknown;
    }
    match load_code(source_dir, source_zip) {
        Ok(Some(code)) => Value::Value(code.digest),
        Ok(None) => Value::Null,
        Err((attribute, message)) => {
            diags.error_short(message, AttributePath::new(attribute));
            Value::Unknown
        }
    }
}

/// The digest of the code the server holds, from its source listing; `None` when the
/// listing cannot tell (binary or cut files), so the next apply uploads again.
pub async fn remote_digest(client: &Client, kind: Kind, name: &str) -> Option<String> {
    let files = client.source(kind, name).await.ok()?;
    if files.is_empty() || files.iter().any(|f| f.binary || f.truncated) {
        return None;
    }
    let contents: Option<Vec<(&str, &[u8])>> = files
        .iter()
        .map(|f| Some((f.name.as_str(), f.content.as_deref()?.as_bytes())))
        .collect();
    Some(archive::content_digest(contents?))
}

/// Reports a failed validation rule on the attribute it names.
pub fn check(diags: &mut Diagnostics, result: Result<(), sless_api::validation::ValidationError>) {
    if let Err(e) = result {
        let path = AttributePath::new(e.field.clone());
        diags.error(format!("invalid {}", e.field), e.to_string(), path);
    }
}

/// The function a trigger or job calls, set as `function` or as `function_ref` (the
/// original provider's and the API's name): one setting under two names. Answers the
/// name in use and its value; setting both is an error.
pub fn function_setting<'v>(
    diags: &mut Diagnostics,
    function: &'v Value<String>,
    function_ref: &'v Value<String>,
) -> (&'static str, &'v Value<String>) {
    if function.is_null() {
        return ("function_ref", function_ref);
    }
    if !function_ref.is_null() {
        diags.error_short(
            "function and function_ref are one setting: set one of them",
            AttributePath::new("function_ref"),
        );
    }
    ("function", function)
}

/// Plans the configured function under both names, so either reads it and moving from
/// one name to the other changes nothing.
pub fn plan_function(
    diags: &mut Diagnostics,
    planned: (&mut Value<String>, &mut Value<String>),
    config: (&Value<String>, &Value<String>),
) {
    let (_, value) = function_setting(diags, config.0, config.1);
    *planned.0 = value.clone();
    *planned.1 = value.clone();
}

/// A number attribute as the API's u32, with the attribute named when it does not fit.
pub fn to_u32(diags: &mut Diagnostics, field: &'static str, value: &Value<i64>) -> Option<u32> {
    match value {
        Value::Value(n) => match u32::try_from(*n) {
            Ok(n) => Some(n),
            Err(_) => {
                diags.error_short(
                    format!("{field} must not be negative"),
                    AttributePath::new(field),
                );
                None
            }
        },
        _ => None,
    }
}

/// A string attribute's text ("" when null or unknown).
pub fn text(value: &Value<String>) -> &str {
    value
        .as_ref_option()
        .map(String::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(path: &Path) -> Value<String> {
        Value::Value(path.display().to_string())
    }

    #[test]
    fn a_folder_and_its_zip_have_one_digest() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("lib")).unwrap();
        std::fs::write(src.join("handler.py"), "def handle(e):\n    return e\n").unwrap();
        std::fs::write(src.join("lib/util.py"), "X = 1\n").unwrap();
        let folder = load_code(&path(&src), &Value::Null).unwrap().unwrap();
        let zip = dir.path().join("code.zip");
        std::fs::write(&zip, &folder.zip).unwrap();
        let zipped = load_code(&Value::Null, &path(&zip)).unwrap().unwrap();
        assert_eq!(folder.digest, zipped.digest);

        assert!(load_code(&Value::Null, &Value::Null).unwrap().is_none());
        let missing = load_code(&path(&dir.path().join("nope")), &Value::Null);
        assert_eq!(missing.err().unwrap().0, "source_dir");
        let not_a_zip = load_code(&Value::Null, &path(&src.join("handler.py")));
        assert_eq!(not_a_zip.err().unwrap().0, "source_zip");
    }

    #[test]
    fn function_and_function_ref_are_one_setting() {
        let name = Value::Value("hello".to_string());
        let mut diags = Diagnostics::default();
        assert_eq!(
            function_setting(&mut diags, &Value::Null, &name),
            ("function_ref", &name)
        );
        assert_eq!(
            function_setting(&mut diags, &name, &Value::Null),
            ("function", &name)
        );
        assert!(diags.errors.is_empty());

        let (mut function, mut function_ref) = (Value::Null, Value::Null);
        plan_function(
            &mut diags,
            (&mut function, &mut function_ref),
            (&Value::Null, &name),
        );
        assert_eq!((&function, &function_ref), (&name, &name));
        plan_function(
            &mut diags,
            (&mut function, &mut function_ref),
            (&Value::Null, &Value::Null),
        );
        assert_eq!((&function, &function_ref), (&Value::Null, &Value::Null));
        assert!(diags.errors.is_empty());

        function_setting(&mut diags, &name, &name);
        assert_eq!(diags.errors.len(), 1, "both set is refused");
    }
}
