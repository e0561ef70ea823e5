terraform {
  # Only the built-in provider (terraform_data) is used: nothing to download,
  # so init, validate, plan and a render-only apply work offline.
  required_version = ">= 1.5.0"
}
