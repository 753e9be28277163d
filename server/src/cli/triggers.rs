//! `sless trigger enable|disable NAME`: start or stop a trigger in place.

use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};
use sless_client::client::{Client, TriggerWait};

use super::{Connection, POLL_INTERVAL, is_not_found};

/// How long the command waits for the platform to act on the change.
const SETTLE_WAIT: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct TriggerArgs {
    #[command(subcommand)]
    pub action: TriggerAction,
}

#[derive(Subcommand)]
pub enum TriggerAction {
    /// Start a trigger (its function runs again).
    Enable(TriggerName),
    /// Stop a trigger: an http trigger makes /fn answer 503, a cron trigger stops firing.
    Disable(TriggerName),
}

#[derive(Args)]
pub struct TriggerName {
    /// The trigger's name (sless deploy names them <function>-http and <function>-cron).
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(args: TriggerArgs) -> anyhow::Result<()> {
    let (target, enabled) = match args.action {
        TriggerAction::Enable(target) => (target, true),
        TriggerAction::Disable(target) => (target, false),
    };
    let client = target.connection.client()?;
    let name = target.name.as_str();
    match client.set_trigger_enabled(name, enabled).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => bail!("{}", not_found_hint(&client, name).await),
        Err(e) => return Err(e.into()),
    }
    let verb = if enabled { "enabled" } else { "disabled" };
    // The runner starts or stops the function after the change: wait until it has, so
    // the next command sees the new state.
    match client
        .wait_for_trigger(name, SETTLE_WAIT, POLL_INTERVAL)
        .await?
    {
        TriggerWait::Settled(_) => {}
        TriggerWait::NotBuilt(trigger, phase) => eprintln!(
            "warning: trigger {name} is enabled but {} is {phase}",
            trigger.function_ref
        ),
        TriggerWait::TimedOut(trigger) => eprintln!(
            "warning: trigger {name} is {verb} but not yet {}{}",
            if enabled { "active" } else { "inactive" },
            trigger
                .message
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
    }
    eprintln!("trigger {name} {verb}");
    Ok(())
}

/// A missing trigger is often a function's name: name its triggers.
async fn not_found_hint(client: &Client, name: &str) -> String {
    let mut message = format!(
        "no trigger named {name:?} in namespace {}",
        client.namespace()
    );
    if let Ok(triggers) = client.list_triggers().await {
        let of_function: Vec<String> = triggers
            .into_iter()
            .filter(|t| t.function_ref == name)
            .map(|t| t.name)
            .collect();
        if !of_function.is_empty() {
            message.push_str(&format!(
                "; {name} is a function, its triggers are: {}",
                of_function.join(", ")
            ));
        }
    }
    message
}
