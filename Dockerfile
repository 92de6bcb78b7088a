# The loadwise operator image: small, non-root, the console script as entrypoint.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin loadwise
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels loadwise && rm -rf /wheels
USER 10001
EXPOSE 8080
ENTRYPOINT ["loadwise"]
CMD ["run"]
