# One gateway onto one edge host over SSH. gateway-region calls it once per
# gateway, each after the one before is ready, so a region's gateways are
# never restarted at once.

variable "enabled" {
  description = "Install (true) or do nothing (false: render-only runs)."
  type        = bool
}

variable "name" {
  description = "The gateway's node.name; its certificate files are NAME.pem and NAME-key.pem in certs_dir."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", var.name))
    error_message = "The gateway name must be letters, digits, '.', '_' and '-', at most 63 characters, starting and ending with a letter or digit."
  }
}

variable "ssh_host" {
  description = "Address Terraform connects to over SSH."
  type        = string
}

variable "ssh" {
  description = "SSH settings, as in gateway-region."
  type = object({
    user             = string
    port             = number
    private_key_file = optional(string)
    bastion_host     = optional(string)
    bastion_user     = optional(string)
    host_key         = optional(string)
    timeout          = string
  })
}

variable "install" {
  description = "Configuration directory, binary path, service account and readiness timeout (seconds) on the host."
  type = object({
    config_dir    = string
    binary        = string
    user          = string
    ready_timeout = number
  })
}

variable "config" {
  description = "The rendered configuration file."
  type        = string
  sensitive   = true
}

variable "config_hash" {
  description = "sha256 of config; a change re-installs."
  type        = string
}

variable "admin" {
  description = "admin.listen of the gateway (ip:port), for the readiness check; empty disables the check."
  type        = string
}

variable "binary_file" {
  description = "Local mrgw binary."
  type        = string
  default     = null
}

variable "unit_file" {
  description = "Local systemd unit file."
  type        = string
}

variable "certs_dir" {
  description = "Local directory with ca.pem, NAME.pem and NAME-key.pem."
  type        = string
  default     = null
}
