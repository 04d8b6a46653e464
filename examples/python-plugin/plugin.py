#!/usr/bin/env python3
"""A streamer model plugin in Python: fills the [MASK] in a sentence.

It implements the plugin contract (model/plugin/pluginpb/model.proto and the
handshake documented in model/plugin/pluginpb/doc.go) with grpcio and the
message classes protoc generates from model.proto (model_pb2.py). The model is
a small bigram language model trained on a text corpus at Init; replace
BigramFillMask with your own class that has the same check and predict_batch
methods to serve anything else (see README.md for a PyTorch model).

Settings (--plugin-arg key=value):
    corpus=PATH   the text to train on (default: ../fillmask/corpus.txt)
"""

import base64
import collections
import datetime
import math
import os
import re
import shutil
import signal
import ssl
import sys
import tempfile
import threading
from concurrent import futures

import grpc
import msgpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import model_pb2  # generated: protoc --python_out=. model.proto

# The handshake: these must match model/plugin/pluginpb/handshake.go.
MAGIC_COOKIE_KEY = "STREAMER_PLUGIN"
MAGIC_COOKIE_VALUE = "6f3c1e0a-streamer-model-plugin"
PROTOCOL_VERSION = 1
CORE_PROTOCOL_VERSION = 1  # go-plugin's own, always 1

SERVICE = "streamer.plugin.v1.Model"
CONTROLLER = "plugin.GRPCController"  # go-plugin asks it to shut down
MAX_MESSAGE = 2**31 - 1  # batches can be large: lift gRPC's 4 MiB default

TOKEN = re.compile(r"\[mask\]|[^\W_]+(?:'[^\W_]+)?|[.,!?;:]")


def tokenize(text):
    return TOKEN.findall(text.lower())


class BigramFillMask:
    """Fills a mask with the word w that maximises P(w | left) * P(right | w)."""

    def __init__(self, corpus_path):
        self.unigrams = collections.Counter()
        self.bigrams = collections.Counter()
        with open(corpus_path, encoding="utf-8") as corpus:
            for line in corpus:
                if line.lstrip().startswith("#"):
                    continue
                tokens = ["<s>"] + tokenize(line) + ["</s>"]
                self.unigrams.update(tokens)
                self.bigrams.update(zip(tokens, tokens[1:]))
        self.vocabulary = [w for w in self.unigrams if w[0].isalnum()]
        if not self.vocabulary:
            raise ValueError(f"{corpus_path}: no words to learn from")

    def _log_prob(self, prev, word):
        # Add-one smoothing: every word after every word, at least a little.
        count = self.bigrams[(prev, word)] + 1
        return math.log(count / (self.unigrams[prev] + len(self.unigrams)))

    def fill(self, text):
        tokens = ["<s>"] + tokenize(text) + ["</s>"]
        if tokens.count("[mask]") != 1:
            raise ValueError("want a sentence with exactly one [MASK]")
        i = tokens.index("[mask]")
        left, right = tokens[i - 1], tokens[i + 1]
        return max(self.vocabulary,
                   key=lambda w: (self._log_prob(left, w) + self._log_prob(w, right), w))

    def check(self, value):
        """Why value cannot be an input of predict_batch, or None if it can.

        The server asks it of every item before the batch runs and leaves out
        the items it refuses, each failing alone with this message: one
        caller's wrong item must not fail its batch-mates' predict_batch.
        """
        if not isinstance(value, str):
            return f"want a string, got {type(value).__name__}"
        return None

    def predict_batch(self, texts):
        """One answer per text, or an exception for a text that fails alone.

        A model that runs whole batches at once (a PyTorch model) does its
        batch here, in one call.
        """
        results = []
        for text in texts:
            try:
                results.append(self.fill(text))
            except ValueError as err:
                results.append(err)
        return results


class Plugin:
    """Serves the Model service for one model object."""

    def __init__(self, server):
        self.server = server
        self.model = None
        self.lock = threading.Lock()  # one batch at a time, as the contract says

    def init(self, request, context):
        args = dict(request.args)
        default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fillmask", "corpus.txt")
        try:
            self.model = BigramFillMask(args.get("corpus", default))
        except (OSError, ValueError) as err:
            # No "init:" of its own: the worker names the call that failed.
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        print(f"python-plugin: bigram model of {len(self.model.vocabulary)} words ready", file=sys.stderr, flush=True)
        return model_pb2.InitResponse(name="python fillmask", device="cpu")

    def predict(self, requests, context):
        # One stream carries every batch: answer each request, in order.
        for request in requests:
            yield self.predict_one(request)

    def predict_one(self, request):
        response = self.answer(request)
        # Echo the batch's id: the worker checks that each answer is the one
        # to the batch it sent, so that no caller gets another's results.
        response.id = request.id
        return response

    def answer(self, request):
        if self.model is None:
            return model_pb2.PredictResponse(error="Predict before Init")
        response = model_pb2.PredictResponse(outputs=[b""] * len(request.items))
        with self.lock:
            accepted = {}  # the values the model takes, by index in the batch
            for i, raw in enumerate(request.items):
                value, error = self.read(raw)
                if error is None:
                    accepted[i] = value
                else:
                    response.item_errors[i] = error
            if not accepted:
                return response
            try:
                results = list(self.model.predict_batch(list(accepted.values())))
            except Exception as err:  # the whole batch failed
                return model_pb2.PredictResponse(error=f"{type(err).__name__}: {err}")
        if len(results) != len(accepted):
            return model_pb2.PredictResponse(
                error=f"the model answered {len(results)} results for {len(accepted)} inputs")
        for i, result in zip(accepted, results):
            output, error = encode(result)
            if error is None:
                response.outputs[i] = output
            else:
                response.item_errors[i] = error
        return response

    def read(self, raw):
        """An item's value and None, or None and why the item fails alone."""
        try:
            # A map keyed by numbers is msgpack too: whether the model takes
            # one is for its check to say.
            value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except ValueError as err:  # not msgpack, or a string that is not UTF-8
            return None, f"item is not valid msgpack: {str(err) or type(err).__name__}"
        except TypeError as err:  # a map keyed by a list or a map
            return None, f"item has a map key Python cannot hold: {err}"
        try:
            return value, self.model.check(value)
        except Exception as err:  # a check that trips on a value refuses it
            return None, f"{type(err).__name__}: {err}"

    def shutdown(self, request, context):
        threading.Thread(target=self.server.stop, args=(0,)).start()
        return b""  # google.protobuf.Empty, encoded


def encode(result):
    """A result's msgpack bytes and None, or None and why the item fails alone."""
    if isinstance(result, Exception):
        return None, str(result)
    try:
        return msgpack.packb(result, use_bin_type=True), None
    except (TypeError, ValueError, OverflowError) as err:
        return None, f"the model's result for this item cannot be sent as msgpack: {err}"


def handlers(plugin):
    model = grpc.method_handlers_generic_handler(SERVICE, {
        "Init": grpc.unary_unary_rpc_method_handler(
            plugin.init,
            request_deserializer=model_pb2.InitRequest.FromString,
            response_serializer=model_pb2.InitResponse.SerializeToString),
        "Predict": grpc.stream_stream_rpc_method_handler(
            plugin.predict,
            request_deserializer=model_pb2.PredictRequest.FromString,
            response_serializer=model_pb2.PredictResponse.SerializeToString),
    })
    # Shutdown takes and returns an empty message: raw bytes will do.
    controller = grpc.method_handlers_generic_handler(CONTROLLER, {
        "Shutdown": grpc.unary_unary_rpc_method_handler(plugin.shutdown),
    })
    return [model, controller]


def server_certificate():
    """A self-signed certificate for "localhost" and its key, both PEM.

    The worker makes a certificate of its own for every plugin it starts
    and passes it in PLUGIN_CLIENT_CERT; the plugin answers with this one
    in its handshake line. Each side then accepts only the other: no other
    process can call the plugin, even one that can reach its socket.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, key_agreement=True, key_cert_sign=True,
            content_commitment=False, data_encipherment=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def main():
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        print(f"{sys.argv[0]} is a streamer model plugin: a streamer worker starts it.\n"
              f"Serve it with: streamer serve --plugin {sys.argv[0]}", file=sys.stderr)
        sys.exit(1)
    versions = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(PROTOCOL_VERSION)).split(",")
    if str(PROTOCOL_VERSION) not in versions:
        print(f"python-plugin: the worker speaks plugin protocol {versions}, this plugin {PROTOCOL_VERSION}",
              file=sys.stderr)

    # SIGTERM, SIGINT and SIGHUP are the server's, and reach this process too when
    # a service manager signals every process of the service: the worker
    # stops this plugin itself once its batches are answered.
    def ignored(signum, _frame):
        print(f"python-plugin: {signal.Signals(signum).name} ignored: its worker stops it", file=sys.stderr)
    signal.signal(signal.SIGTERM, ignored)
    signal.signal(signal.SIGINT, ignored)
    signal.signal(signal.SIGHUP, ignored)

    # The worker names a private directory for the socket; mkdtemp makes
    # one (mode 0700) inside it, or in the system's when run by hand. The
    # names are short: a socket's path takes 107 bytes at most, and the
    # worker leaves a plugin 24 of them.
    socket_dir = tempfile.mkdtemp(prefix="p", dir=os.environ.get("PLUGIN_UNIX_SOCKET_DIR"))
    socket_path = os.path.join(socket_dir, "model.sock")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                 ("grpc.max_send_message_length", MAX_MESSAGE)])
    plugin = Plugin(server)
    server.add_generic_rpc_handlers(handlers(plugin))
    handshake = f"{CORE_PROTOCOL_VERSION}|{PROTOCOL_VERSION}|unix|{socket_path}|grpc"
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT")
    if client_cert:
        cert_pem, key_pem = server_certificate()
        credentials = grpc.ssl_server_credentials(
            [(key_pem, cert_pem)], root_certificates=client_cert.encode(), require_client_auth=True)
        server.add_secure_port("unix:" + socket_path, credentials)
        der = ssl.PEM_cert_to_DER_cert(cert_pem.decode())
        handshake += "|" + base64.b64encode(der).decode().rstrip("=")
    else:
        server.add_insecure_port("unix:" + socket_path)
    server.start()
    try:
        # The handshake line, then nothing more on stdout: point it at stderr,
        # which the server log shows tagged with the worker's slot.
        print(handshake, flush=True)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        server.wait_for_termination()
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
