output "installed" {
  description = "Whether this run installs the gateway (false when disabled)."
  value       = var.enabled
}

output "id" {
  description = "Id of the installation resource (null when disabled); it changes on every re-installation."
  value       = one(terraform_data.install[*].id)
}
