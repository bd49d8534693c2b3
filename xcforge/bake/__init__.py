"""Stage 5, bake: plans → docker buildx bake (docker-bake.hcl + a run file) → OCI archives and build results.

definition.py writes the bake definition (the committed docker-bake.hcl and each run's file),
runner.py runs `docker buildx bake` and splits its progress per target, stage.py is the stage
itself (plans → checked archives, merged by digest, and one frozen record each; pushing them is
the publish stage's); contexts.py checks the rendered files and prepares the build contexts first;
docker_env.py, engine_wheel.py, fingerprint.py and result.py are what it needs on the way. (Not
`build/`: that is the conventional build-output folder name, which tools and .gitignore skip.)
"""
