variable "regions" {
  description = "Each region's gateways (1 to 16), by region name, as the gateway-region module takes them."
  type = map(object({
    gateways = list(object({
      name              = string
      ssh_host          = string
      lan_listen        = string
      control_listen    = string
      control_advertise = optional(string)
      gossip_bind       = string
      gossip_advertise  = optional(string, "")
      admin_listen      = optional(string, "127.0.0.1:9464")
      capacity          = optional(number)
      planes = list(object({
        name      = string
        local     = string
        advertise = optional(string)
      }))
    }))
  }))
  validation {
    condition     = length(var.regions) >= 2
    error_message = "This example wires at least two regions to each other."
  }
}

variable "rtt_hints" {
  description = "Optional: expected round trip between two regions, keyed \"a/b\" with the two names in alphabetical order (\"eu-west/us-east\" = \"80ms\"); rendered as regions[].rtt_hint. Routes without one are measured from the first sample."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for k, v in var.rtt_hints : can(regex("^[^/]+/[^/]+$", k)) && can(regex("^[0-9]+(ms|s)$", v))])
    error_message = "rtt_hints keys are \"region-a/region-b\" and values durations such as \"80ms\"."
  }
}

variable "remote_seeds" {
  description = "How many gateways of other regions each gateway seeds gossip with (see the gateway-region module)."
  type        = number
  default     = 3
}

variable "control_deny" {
  description = "Revoked gateways every gateway refuses: NAME, REGION/NAME, REGION/* or serial:HEX (see the gateway-region module)."
  type        = list(string)
  default     = []
}

variable "gossip_keyring" {
  description = "Gossip keys shared by every gateway of every region (base64 of 16, 24 or 32 bytes; the first encrypts)."
  type        = list(string)
  sensitive   = true
}

variable "host_keys" {
  description = "Host credentials (ID:BASE64) every gateway accepts (see the gateway-region module)."
  type        = list(string)
  sensitive   = true
}

variable "wan" {
  description = "WAN settings for every gateway (see the gateway-region module)."
  type        = any
  default     = {}
}

variable "limits" {
  description = "Limits for every gateway (see the gateway-region module)."
  type        = any
  default     = {}
}

variable "scheduler" {
  description = "Traffic classes for every gateway (see the gateway-region module)."
  type        = any
  default     = {}
}

variable "deploy" {
  description = "Install onto the hosts over SSH; false (the default) only renders the configurations."
  type        = bool
  default     = false
}

variable "binary_file" {
  description = "Local mrgw binary to install (deploy = true)."
  type        = string
  default     = null
}

variable "certs_dir" {
  description = "Local directory with ca.pem, NAME.pem and NAME-key.pem for every gateway (deploy = true)."
  type        = string
  default     = null
}

variable "ssh" {
  description = "SSH settings for every host (see the gateway-region module)."
  type        = any
  default     = {}
}
