"""The operator's side: Kubernetes manifests and docker run lines for a signed image."""
