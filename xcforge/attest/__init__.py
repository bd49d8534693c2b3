"""Build outputs beside each image: SBOM (CycloneDX) and BuildKit provenance per platform."""
