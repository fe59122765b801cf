# gpuq image: `docker build -t gpuq:0.1.0 .`
# One image for every role: `gpuq api`, `gpuq serve` (dispatcher + API), `gpuq db upgrade`;
# with the plots extra, so `gpuq simulate --report DIR` draws its figures in the image too.
FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir --upgrade pip
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[plots]'

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    GPUQ_HOST=0.0.0.0 \
    GPUQ_PORT=8000 \
    GPUQ_DATA_DIR=/var/lib/gpuq
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'gpuq[plots]' \
 && rm -rf /wheels \
 && groupadd --system --gid 10001 gpuq \
 && useradd --system --uid 10001 --gid gpuq --home-dir /var/lib/gpuq --shell /usr/sbin/nologin gpuq \
 && mkdir -p /var/lib/gpuq \
 && chown gpuq:gpuq /var/lib/gpuq
# numeric user so Kubernetes' runAsNonRoot can verify it
USER 10001:10001
WORKDIR /var/lib/gpuq
EXPOSE 8000
ENTRYPOINT ["gpuq"]
CMD ["serve"]
