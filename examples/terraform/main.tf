# The demo's functions, a trigger of each kind that the demo uses, and its job, through
# the sless provider. Endpoint and token come from SLESS_ENDPOINT and SLESS_API_TOKEN.

terraform {
  required_providers {
    sless = {
      source = "kube5s/sless"
    }
  }
}

provider "sless" {}

variable "greeter_enabled" {
  description = "false stops greeter's http trigger: /fn/.../greeter-node answers 503"
  type        = bool
  default     = true
}

variable "report_run_id" {
  description = "Raise it to run the report job again"
  type        = number
  default     = 1
}

resource "sless_function" "hello" {
  name       = "hello-python"
  runtime    = "python3.11"
  source_dir = "${path.module}/../hello-python"
}

resource "sless_trigger" "hello_http" {
  name     = "hello-python-http"
  type     = "http"
  function = sless_function.hello.name
}

resource "sless_function" "greeter" {
  name        = "greeter-node"
  runtime     = "nodejs20"
  source_dir  = "${path.module}/../greeter-node"
  memory_mb   = 256
  timeout_sec = 30
  env_vars = {
    GREETING = "hi"
  }
}

resource "sless_trigger" "greeter_http" {
  name     = "greeter-node-http"
  type     = "http"
  function = sless_function.greeter.name
  enabled  = var.greeter_enabled
}

resource "sless_trigger" "greeter_cron" {
  name     = "greeter-node-cron"
  type     = "cron"
  function = sless_function.greeter.name
  schedule = "*/5 * * * *"
}

resource "sless_service" "clock" {
  name       = "clock-service"
  runtime    = "nodejs20"
  source_dir = "${path.module}/../clock-service"
}

resource "sless_job" "report" {
  name       = "report-job"
  runtime    = "python3.11"
  source_dir = "${path.module}/../report-job"
  event_json = jsonencode({ numbers = [1, 2, 3] })
  run_id     = var.report_run_id
}

data "sless_function" "hello" {
  name = sless_function.hello.name
}

data "sless_functions" "all" {
  depends_on = [sless_function.hello, sless_function.greeter, sless_service.clock]
}

output "hello_url" {
  value = sless_trigger.hello_http.url
}

output "greeter_url" {
  value = sless_trigger.greeter_http.url
}

output "hello_runtime" {
  value = data.sless_function.hello.runtime
}

output "clock_url" {
  value = sless_service.clock.url
}

output "report" {
  description = "The job's result, as its handler returned it"
  value       = sless_job.report.message
}

output "deployed" {
  value = [for f in data.sless_functions.all.functions : "${f.kind} ${f.name}: ${f.phase}"]
}
