# The image of conf/examples/whisper.yaml (a Whisper transcription on one GPU): OpenAI Whisper on CUDA.
#
# Build it as the user who submits the job, in that user's rootless Docker, on every
# node the job may run on (or push it to a registry the nodes reach and keep the
# spec's default `pull: missing`):
#
#   docker build -t openai-whisper:latest -f conf/examples/whisper.Dockerfile conf/examples
#
# The build needs the internet (Docker Hub, Debian's mirror, PyPI, download.pytorch.org):
# for nodes without it, build elsewhere and `docker save`/`docker load` (docs/whisper.md).
#
# The GPU comes from the NVIDIA container toolkit at run time (`acbslurm run` asks for
# exactly the job's GPUs); the image needs only CUDA's user-space libraries, which the
# PyTorch wheels bring along.
FROM python:3.11-slim

# ffmpeg decodes the audio file; git is needed by nothing at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg \
 && rm -rf /var/lib/apt/lists/*

# torch with CUDA 12.1 libraries, then Whisper (which pulls in tiktoken, numba...).
RUN pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cu121 \
 && pip install --no-cache-dir openai-whisper

# The job names the model directory (--model_dir) on the mounted home, so the model
# (~1.5 GB for turbo) is downloaded once and kept between jobs, not baked in here.
ENTRYPOINT []
CMD ["whisper", "--help"]
