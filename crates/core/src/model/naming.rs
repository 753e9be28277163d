use sha2::{Digest, Sha256};

/// The public URL of a function or service: `<external_url>/fn/<ns>/<name>`.
pub fn function_url(external_url: &str, namespace: &str, name: &str) -> String {
    format!(
        "{}/fn/{namespace}/{name}",
        external_url.trim_end_matches('/')
    )
}

/// Where a namespace's workloads (Deployments, run Jobs, CronJobs) run in Kubernetes,
/// under the `restricted` Pod Security profile.
pub fn deploy_namespace(namespace: &str) -> String {
    format!("sless-fn-{namespace}")
}

/// Where a namespace's image builds run: rootless BuildKit needs what `restricted` (and
/// `baseline`) forbid, so builds get a namespace of their own.
pub fn build_namespace(namespace: &str) -> String {
    format!("sless-build-{namespace}")
}

/// The image a workload's build pushes: `<registry>/sless-<ns>-<name>:<sha12 of s3Key>`.
pub fn workload_image(registry: &str, namespace: &str, name: &str, s3_key: &str) -> String {
    let digest = hex::encode(Sha256::digest(s3_key.as_bytes()));
    format!(
        "{}/sless-{namespace}-{name}:{}",
        registry.trim_end_matches('/'),
        &digest[..12]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_namespace_prefixes_fn() {
        assert_eq!(
            deploy_namespace("sless-2bd806c97f0e00af"),
            "sless-fn-sless-2bd806c97f0e00af"
        );
    }

    #[test]
    fn workload_image_uses_sha12_of_key() {
        let image = workload_image("reg.example/", "sless-ab", "hello", "contexts/x.tar.gz");
        let (repo, tag) = image.rsplit_once(':').unwrap();
        assert_eq!(repo, "reg.example/sless-sless-ab-hello");
        assert_eq!(tag.len(), 12);
        assert!(tag.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
