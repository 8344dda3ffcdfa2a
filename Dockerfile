FROM python:3.11-slim
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
COPY requirements.txt Makefile ./
COPY proto ./proto
RUN make setup PY=python3 && ln -s /app/.venv/bin/python /usr/local/bin/apiary-python
COPY services ./services
COPY tools ./tools
ENV PATH=/app/.venv/bin:$PATH
