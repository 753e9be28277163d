//! `sless ls` and `sless describe NAME`.

use clap::Args;
use sless_api::{TriggerResponse, WorkloadResponse};
use sless_client::client::Kind;

use super::{Connection, require_workload, table};

/// Invocations `describe` shows.
const RECENT_CALLS: usize = 10;

#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Args)]
pub struct DescribeArgs {
    /// A function or service.
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

/// `http`, `cron(*/5 * * * *)`, `event(queue)`; `-off` when stopped.
fn trigger_label(trigger: &TriggerResponse) -> String {
    let detail = match trigger.trigger_type.as_str() {
        "cron" => trigger.schedule.as_deref(),
        "event" => trigger.queue.as_deref(),
        _ => None,
    };
    let mut label = match detail {
        Some(detail) => format!("{}({detail})", trigger.trigger_type),
        None => trigger.trigger_type.clone(),
    };
    if !trigger.enabled {
        label.push_str("-off");
    }
    label
}

fn type_rank(trigger_type: &str) -> u8 {
    match trigger_type {
        "http" => 0,
        "cron" => 1,
        _ => 2,
    }
}

pub fn ls_table(workloads: &[WorkloadResponse], triggers: &[TriggerResponse]) -> String {
    let rows: Vec<Vec<String>> = workloads
        .iter()
        .map(|w| {
            let mut own: Vec<&TriggerResponse> = triggers
                .iter()
                .filter(|t| t.function_ref == w.name)
                .collect();
            own.sort_by_key(|t| (type_rank(&t.trigger_type), t.name.clone()));
            let labels: Vec<String> = own.into_iter().map(trigger_label).collect();
            vec![
                w.name.clone(),
                w.kind.to_string(),
                w.runtime.clone(),
                w.phase.to_string(),
                if labels.is_empty() {
                    "-".into()
                } else {
                    labels.join(",")
                },
                sless_api::instances_text(w.instances, w.min_instances, w.max_instances),
                w.url.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(&sless_api::LIST_COLUMNS, &rows)
}

pub async fn ls(args: LsArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let mut workloads = client.list_workloads(Kind::Function).await?;
    workloads.extend(client.list_workloads(Kind::Service).await?);
    workloads.sort_by(|a, b| a.name.cmp(&b.name));
    let mut triggers = client.list_triggers().await?;
    triggers.sort_by(|a, b| a.name.cmp(&b.name));
    if workloads.is_empty() {
        eprintln!(
            "no functions or services in namespace {}; deploy one with sless deploy",
            client.namespace()
        );
        return Ok(());
    }
    print!("{}", ls_table(&workloads, &triggers));
    Ok(())
}

pub async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let client = args.connection.client()?;
    let (collection, w) = require_workload(&client, &args.name).await?;
    let mut triggers: Vec<TriggerResponse> = client
        .list_triggers()
        .await?
        .into_iter()
        .filter(|t| t.function_ref == w.name)
        .collect();
    triggers.sort_by(|a, b| a.name.cmp(&b.name));
    // Call history is a nicety: a platform without it still describes the rest.
    let calls = client
        .invocations(collection, &w.name, RECENT_CALLS)
        .await
        .ok();

    let dash = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".into());
    let timeout = if w.timeout_sec == 0 {
        "none".to_string()
    } else {
        format!("{} s", w.timeout_sec)
    };
    let mut fields = vec![
        ("Name", w.name.clone()),
        ("Kind", collection.noun().to_string()),
        ("Namespace", w.namespace.clone()),
        ("Runtime", w.runtime.clone()),
        ("Entrypoint", w.entrypoint.clone()),
        ("Memory", format!("{} MB", w.memory_mb)),
        ("CPU", format!("{} millicores", w.cpu_millis)),
        ("Disk", format!("{} MB", w.disk_mb)),
        ("Timeout", timeout),
        ("Egress", w.egress.to_string()),
        ("Phase", w.phase.to_string()),
        ("Instances", describe_instances(&w)),
        ("URL", dash(&w.url)),
        ("Image", dash(&w.image_ref)),
        ("S3 key", dash(&w.s3_key)),
        ("Last built", dash(&w.last_built_at)),
        ("Created", w.created_at.clone()),
        ("Resource version", w.resource_version.clone()),
    ];
    if w.env_vars.is_empty() {
        fields.push(("Env", "-".into()));
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in &fields {
        out.push_str(&format!("{:width$} {value}\n", format!("{key}:")));
    }
    if !w.env_vars.is_empty() {
        out.push_str("Env:\n");
        for (name, value) in &w.env_vars {
            out.push_str(&format!("  {name}={value}\n"));
        }
    }
    match w.message.as_deref().filter(|m| !m.trim().is_empty()) {
        Some(message) if message.contains('\n') => {
            out.push_str("Message:\n");
            for line in message.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        Some(message) => out.push_str(&format!("{:width$} {message}\n", "Message:")),
        None => {}
    }

    out.push_str("\nTriggers:\n");
    if triggers.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = triggers
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.trigger_type.clone(),
                    t.schedule
                        .clone()
                        .or_else(|| t.queue.clone())
                        .unwrap_or_else(|| "-".into()),
                    if t.enabled { "yes" } else { "no" }.into(),
                    if t.active { "yes" } else { "no" }.into(),
                    t.last_schedule_time
                        .clone()
                        .or_else(|| t.last_message_time.clone())
                        .unwrap_or_else(|| "-".into()),
                    if t.trigger_type == "event" {
                        format!("{}/{}/{}", t.delivered, t.failed, t.dead_lettered)
                    } else {
                        "-".into()
                    },
                    t.message.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        let rendered = table(
            &[
                "NAME",
                "TYPE",
                "SCHEDULE/QUEUE",
                "ENABLED",
                "ACTIVE",
                "LAST RUN",
                "OK/FAILED/DEAD",
                "MESSAGE",
            ],
            &rows,
        );
        for line in rendered.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }

    out.push_str("\nInvocations:\n");
    match calls {
        None => out.push_str("  (not available)\n"),
        Some(calls) => {
            let stats = &calls["stats"];
            let count = stats["count"].as_u64().unwrap_or(0);
            let errors = stats["errors"].as_u64().unwrap_or(0);
            let total = stats["total_duration_ms"].as_f64().unwrap_or(0.0);
            let mean = if count > 0 { total / count as f64 } else { 0.0 };
            out.push_str(&format!(
                "  {}, {} (5xx), {mean:.1} ms mean\n",
                counted(count, "call"),
                counted(errors, "error")
            ));
            let rows: Vec<Vec<String>> = calls["invocations"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|call| {
                    let text = |key: &str| call[key].as_str().unwrap_or("-").to_string();
                    vec![
                        text("time"),
                        text("method"),
                        text("path"),
                        call["status"].to_string(),
                        format!("{:.1} ms", call["duration_ms"].as_f64().unwrap_or(0.0)),
                        text("version"),
                        if call["cold"] == true { "yes" } else { "no" }.to_string(),
                    ]
                })
                .collect();
            if !rows.is_empty() {
                let rendered = table(
                    &[
                        "TIME", "METHOD", "PATH", "STATUS", "DURATION", "VERSION", "COLD",
                    ],
                    &rows,
                );
                for line in rendered.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
            }
        }
    }
    print!("{out}");
    Ok(())
}

/// `1 running (warm), min 0, max 4, target 8 calls each`.
fn describe_instances(w: &WorkloadResponse) -> String {
    let running = match w.instances {
        Some(0) => "0 running (cold: the next call starts one), ".to_string(),
        Some(n) => format!("{n} running (warm), "),
        None => String::new(),
    };
    format!(
        "{running}min {}, max {}, target {} calls each",
        w.min_instances, w.max_instances, w.target_concurrency
    )
}

/// `1 call`, `2 calls`.
fn counted(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(name: &str, kind: &str, schedule: Option<&str>, enabled: bool) -> TriggerResponse {
        TriggerResponse {
            namespace: "ns".into(),
            name: name.into(),
            trigger_type: kind.into(),
            function_ref: "f".into(),
            schedule: schedule.map(String::from),
            queue: None,
            enabled,
            active: enabled,
            url: None,
            last_schedule_time: None,
            message: None,
            resource_version: "1".into(),
            created_at: "now".into(),
            ..Default::default()
        }
    }

    #[test]
    fn trigger_labels() {
        assert_eq!(trigger_label(&trigger("a", "http", None, true)), "http");
        assert_eq!(
            trigger_label(&trigger("a", "http", None, false)),
            "http-off"
        );
        assert_eq!(
            trigger_label(&trigger("b", "cron", Some("*/5 * * * *"), true)),
            "cron(*/5 * * * *)"
        );
        assert_eq!(
            trigger_label(&trigger("b", "cron", Some("0 * * * *"), false)),
            "cron(0 * * * *)-off"
        );
    }

    #[test]
    fn ls_shows_instances_running_and_the_bounds() {
        let workload = |name: &str, instances: Option<u32>| WorkloadResponse {
            name: name.into(),
            instances,
            min_instances: 0,
            max_instances: 4,
            ..serde_json::from_value(serde_json::json!({
                "namespace": "ns", "name": name, "kind": "function", "runtime": "python3.11",
                "entrypoint": "handler.handle", "memory_mb": 128, "cpu_millis": 1000,
                "disk_mb": 512, "timeout_sec": 30, "env_vars": {}, "phase": "Ready",
                "message": null, "image_ref": null, "s3_key": null, "last_built_at": null,
                "url": null, "resource_version": "1", "created_at": "now"
            }))
            .unwrap()
        };
        let text = ls_table(
            &[
                workload("cold", Some(0)),
                workload("warm", Some(2)),
                workload("kube", None),
            ],
            &[],
        );
        let cells: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(cells[0][5], "INSTANCES", "{text}");
        assert_eq!(
            (cells[1][5], cells[2][5], cells[3][5]),
            ("0/0-4", "2/0-4", "-/0-4"),
            "{text}"
        );
        assert!(describe_instances(&workload("cold", Some(0))).starts_with("0 running (cold"));
    }

    #[test]
    fn one_is_singular() {
        assert_eq!(counted(1, "error"), "1 error");
        assert_eq!(counted(0, "call"), "0 calls");
        assert_eq!(counted(2, "call"), "2 calls");
    }
}
