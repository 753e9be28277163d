//! The CRDs `sless crds` prints: generated from the Rust types, structural, with the
//! status subresource, and identical to `operator/deploy/crds.yaml`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use operator::crds::crds_yaml;
use serde::Deserialize;

fn parsed() -> Vec<CustomResourceDefinition> {
    let yaml = crds_yaml().unwrap();
    serde_yaml::Deserializer::from_str(&yaml)
        .map(|doc| {
            CustomResourceDefinition::deserialize(doc).expect("an apiextensions.k8s.io/v1 CRD")
        })
        .collect()
}

#[test]
fn crds_are_apiextensions_v1_with_schemas_and_status() {
    let crds = parsed();
    let names: Vec<_> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "functions.sless.kube5s.ru",
            "services.sless.kube5s.ru",
            "triggers.sless.kube5s.ru",
            "functionjobs.sless.kube5s.ru"
        ]
    );
    let yaml = crds_yaml().unwrap();
    assert_eq!(
        yaml.matches("apiVersion: apiextensions.k8s.io/v1\n")
            .count(),
        4
    );
    for crd in &crds {
        let spec = &crd.spec;
        assert_eq!(spec.group, "sless.kube5s.ru");
        assert_eq!(spec.scope, "Namespaced");
        assert_eq!(spec.versions.len(), 1);
        let version = &spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{} has the status subresource",
            spec.names.kind
        );
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("a schema");
        let properties = schema.properties.as_ref().unwrap();
        for part in ["spec", "status"] {
            let property = &properties[part];
            assert_eq!(property.type_.as_deref(), Some("object"), "{part}");
            assert!(property.properties.is_some(), "{part} lists its fields");
        }
        // Structural: no references or untyped nodes the API server would refuse.
        let text = serde_json::to_string(schema).unwrap();
        assert!(!text.contains("$ref"), "{text}");
        assert!(!text.contains("anyOf"), "{text}");
    }
    let function = &crds[0].spec.versions[0];
    let spec = &function
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
        .properties
        .as_ref()
        .unwrap()["spec"];
    let fields = spec.properties.as_ref().unwrap();
    for field in [
        "runtime",
        "entrypoint",
        "memoryMb",
        "timeoutSec",
        "env",
        "s3Key",
        "replicas",
    ] {
        assert!(fields.contains_key(field), "Function spec has {field}");
    }
}

#[test]
fn the_deploy_file_is_the_generated_output() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/crds.yaml");
    let file = std::fs::read_to_string(path).expect("operator/deploy/crds.yaml");
    assert!(
        file == crds_yaml().unwrap(),
        "operator/deploy/crds.yaml is stale: regenerate it with `sless crds > operator/deploy/crds.yaml`"
    );
}
