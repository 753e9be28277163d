//! Whole-resource rules over the scalar rules of `sless-api`.

use super::resources::*;
use sless_api::validation::*;

type Result<T = ()> = std::result::Result<T, ValidationError>;

impl WorkloadSpec {
    pub fn validate(&self) -> Result {
        validate_entrypoint("entrypoint", &self.entrypoint)?;
        validate_memory_mb("memory_mb", self.memory_mb)?;
        validate_cpu_millis("cpu_millis", self.cpu_millis)?;
        validate_disk_mb("disk_mb", self.disk_mb)?;
        validate_timeout_sec("timeout_sec", self.timeout_sec)?;
        validate_env("env_vars", &self.env)?;
        if let Some(replicas) = self.replicas
            && !(0..=MAX_REPLICAS).contains(&replicas)
        {
            return Err(ValidationError::new(
                "replicas",
                format!("{replicas} is out of range: must be between 0 and {MAX_REPLICAS}"),
            ));
        }
        validate_scaling(
            self.min_instances,
            self.max_instances,
            self.target_concurrency,
        )
    }
}

impl TriggerSpec {
    pub fn validate(&self) -> Result {
        validate_name("function_ref", &self.function_ref)?;
        match self.trigger_type {
            TriggerType::Cron => match &self.schedule {
                Some(schedule) => validate_schedule("schedule", schedule),
                None => Err(ValidationError::new(
                    "schedule",
                    "required for a cron trigger (5-field cron, e.g. \"*/5 * * * *\")",
                )),
            },
            TriggerType::Event => {
                match self.queue.as_deref() {
                    Some(queue) if !queue.trim().is_empty() => validate_queue("queue", queue)?,
                    _ => {
                        return Err(ValidationError::new(
                            "queue",
                            "required for an event trigger (the queue to consume)",
                        ));
                    }
                }
                Ok(())
            }
            TriggerType::Http => Ok(()),
        }?;
        validate_event_options(self.trigger_type, self.concurrency, self.max_retries)
    }
}

impl FunctionJobSpec {
    pub fn validate(&self) -> Result {
        match &self.function_ref {
            Some(function_ref) => {
                validate_name("function_ref", function_ref)?;
                if self.runtime.is_some() {
                    return Err(ValidationError::new(
                        "runtime",
                        "give either function_ref (run a function's code) or runtime and \
                         entrypoint (a self-contained job), not both",
                    ));
                }
            }
            None => {
                if self.runtime.is_none() {
                    return Err(ValidationError::new(
                        "function_ref",
                        "required unless the job is self-contained (then give runtime)",
                    ));
                }
            }
        }
        if let Some(entrypoint) = &self.entrypoint {
            validate_entrypoint("entrypoint", entrypoint)?;
        }
        validate_env("env_vars", &self.env)?;
        validate_event_json("event_json", &self.event_json)?;
        validate_timeout_sec("timeout_sec", self.timeout_sec)?;
        if let Some(cpu_millis) = self.cpu_millis {
            validate_cpu_millis("cpu_millis", cpu_millis)?;
        }
        if let Some(disk_mb) = self.disk_mb {
            validate_disk_mb("disk_mb", disk_mb)?;
        }
        if self.run_id < 0 {
            return Err(ValidationError::new(
                "run_id",
                "must be 0 (do not run) or a positive run number",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn trigger_rules() {
        let mut spec = TriggerSpec {
            trigger_type: TriggerType::Cron,
            function_ref: "f".into(),
            schedule: None,
            queue: None,
            enabled: true,
            concurrency: None,
            max_retries: None,
        };
        assert_eq!(spec.validate().unwrap_err().field, "schedule");
        spec.schedule = Some("* * * * *".into());
        assert!(spec.validate().is_ok());
        spec.trigger_type = TriggerType::Event;
        assert_eq!(spec.validate().unwrap_err().field, "queue");
        for bad in ["amq.gen", " q", "q\n", &"q".repeat(250)] {
            spec.queue = Some(bad.to_string());
            assert_eq!(spec.validate().unwrap_err().field, "queue", "{bad:?}");
        }
        spec.queue = Some("orders".into());
        spec.validate().unwrap();
        for (concurrency, ok) in [(0, false), (1, true), (64, true), (65, false)] {
            spec.concurrency = Some(concurrency);
            assert_eq!(spec.validate().is_ok(), ok, "concurrency {concurrency}");
        }
        spec.concurrency = Some(8);
        spec.max_retries = Some(101);
        assert_eq!(spec.validate().unwrap_err().field, "max_retries");
        spec.max_retries = Some(0);
        spec.validate().unwrap();
        spec.trigger_type = TriggerType::Http;
        assert_eq!(spec.validate().unwrap_err().field, "concurrency");
        spec.concurrency = None;
        spec.max_retries = None;
    }

    #[test]
    fn job_rules() {
        let mut spec = FunctionJobSpec {
            function_ref: Some("f".into()),
            runtime: None,
            entrypoint: None,
            env: BTreeMap::new(),
            s3_key: None,
            event_json: "{\"a\":1}".into(),
            run_id: 0,
            timeout_sec: 0,
            cpu_millis: None,
            disk_mb: None,
            egress: None,
        };
        assert!(spec.validate().is_ok());
        let function = WorkloadSpec {
            runtime: sless_api::Runtime::Python311,
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            cpu_millis: sless_api::DEFAULT_CPU_MILLIS,
            disk_mb: sless_api::DEFAULT_DISK_MB,
            timeout_sec: 0,
            env: BTreeMap::new(),
            s3_key: None,
            replicas: None,
            min_instances: None,
            max_instances: None,
            target_concurrency: None,
            egress: sless_api::Egress::None,
        };
        assert_eq!(spec.egress_or(Some(&function)), sless_api::Egress::None);
        assert_eq!(spec.egress_or(None), sless_api::Egress::Internet);
        spec.egress = Some(sless_api::Egress::Allow(vec![]));
        assert_eq!(
            spec.egress_or(Some(&function)),
            sless_api::Egress::Allow(vec![])
        );
        spec.egress = None;
        spec.event_json = "{nope".into();
        assert_eq!(spec.validate().unwrap_err().field, "event_json");
        spec.event_json = "{}".into();
        spec.function_ref = None;
        assert_eq!(spec.validate().unwrap_err().field, "function_ref");
        spec.runtime = Some(Runtime::Python311);
        assert!(spec.validate().is_ok());
        spec.cpu_millis = Some(20_000);
        assert_eq!(spec.validate().unwrap_err().field, "cpu_millis");
        spec.cpu_millis = None;
        spec.disk_mb = Some(1);
        assert_eq!(spec.validate().unwrap_err().field, "disk_mb");
    }

    #[test]
    fn objects_stored_before_cpu_and_disk_get_the_defaults() {
        let stored = serde_json::json!({"runtime": "python3.11", "entrypoint": "handler.handle",
                                        "memoryMb": 128, "timeoutSec": 60});
        let spec: FunctionSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(spec.workload.cpu_millis, DEFAULT_CPU_MILLIS);
        assert_eq!(spec.workload.disk_mb, DEFAULT_DISK_MB);
        assert!(spec.workload.validate().is_ok());
        let mut workload = spec.workload;
        workload.cpu_millis = 49;
        assert_eq!(workload.validate().unwrap_err().field, "cpu_millis");
        workload.cpu_millis = 1000;
        workload.disk_mb = 65_537;
        assert_eq!(workload.validate().unwrap_err().field, "disk_mb");
    }
}
