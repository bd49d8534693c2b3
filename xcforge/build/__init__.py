"""Stage 3, build: plans → docker buildx bake (docker-bake.hcl + a run file) → OCI archives and build results."""
