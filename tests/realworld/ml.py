"""Machine learning: logistic regression, small neural networks, softmax, mixtures."""
import math

import numba
import numpy as np
from scipy.special import expit

from ._case import Case

FIELD = "machine learning"


@numba.njit
def logistic_regression_nll(w, b, X, y, l2):
    """Binary cross-entropy of a logistic regression, written with a stable log(1 + exp)."""
    z = X @ w + b
    nll = 0.0
    for i in range(z.shape[0]):
        if z[i] > 0.0:
            nll += (1.0 - y[i]) * z[i] + math.log1p(math.exp(-z[i]))
        else:
            nll += -y[i] * z[i] + math.log1p(math.exp(z[i]))
    return nll / z.shape[0] + 0.5 * l2 * np.dot(w, w)


def mlp_mse(W1, b1, W2, b2, X, y):
    """One-hidden-layer tanh network with a mean squared error."""
    h = np.tanh(X @ W1 + b1)
    out = h @ W2 + b2
    return np.mean((out - y) ** 2)


@numba.njit
def softmax_xent(W, X, labels):
    """Multinomial logistic loss; integer labels pick the true class's log-probability."""
    logits = X @ W
    n, k = logits.shape
    loss = 0.0
    for i in range(n):
        m = logits[i, 0]
        for j in range(1, k):
            if logits[i, j] > m:
                m = logits[i, j]
        s = 0.0
        for j in range(k):
            s += math.exp(logits[i, j] - m)
        loss += m + math.log(s) - logits[i, labels[i]]
    return loss / n


def gmm_loglik(means, log_sigmas, logit_w, x):
    """1-D Gaussian mixture log-likelihood with a vectorised logsumexp (keepdims)."""
    w = np.exp(logit_w - np.max(logit_w))
    w = w / np.sum(w)
    sig = np.exp(log_sigmas)
    z = (x[:, None] - means[None, :]) / sig[None, :]
    logp = -0.5 * z * z - np.log(sig) - 0.5 * np.log(2.0 * np.pi) + np.log(w)
    m = np.max(logp, axis=1, keepdims=True)
    return np.sum(m[:, 0] + np.log(np.sum(np.exp(logp - m), axis=1)))


def batchnorm_layer_loss(x, gamma, beta, eps=1e-5):
    """A batch-normalisation layer (x.var(axis=0)) followed by a squared output."""
    mu = x.mean(axis=0)
    var = x.var(axis=0)
    xhat = (x - mu) / np.sqrt(var + eps)
    y = gamma * xhat + beta
    return np.sum(y ** 3)


@numba.njit
def rbf_kernel_ridge(log_ell, X, y, alpha):
    """Kernel ridge regression: solve (K + alpha I) c = y; returns the data fit term y^T c."""
    n = X.shape[0]
    ell = math.exp(log_ell)
    K = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            d = X[i] - X[j]
            K[i, j] = math.exp(-0.5 * np.dot(d, d) / (ell * ell))
    c = np.linalg.solve(K + alpha * np.eye(n), y)
    return np.dot(y, c)


def svm_hinge_loss(w, X, y, C):
    """Soft-margin linear SVM objective: margins below zero are clipped with a boolean mask."""
    margins = 1.0 - y * (X @ w)
    margins[margins < 0.0] = 0.0
    return 0.5 * np.dot(w, w) + C * np.sum(margins)


def embedding_regression(E, idx, target):
    """Embedding lookup with an integer index array (repeated ids accumulate gradient)."""
    v = E[idx]
    return np.sum((v.sum(axis=0) - target) ** 2)


def focal_loss(w, X, y, gamma_f):
    """Binary focal loss with scipy.special.expit."""
    p = expit(X @ w)
    pt = np.where(y > 0.5, p, 1.0 - p)
    return -np.sum((1.0 - pt) ** gamma_f * np.log(pt))


def _rng():
    return np.random.default_rng(97)


def _lr_args():
    r = _rng()
    X = r.normal(size=(12, 3))
    y = (X @ np.array([1.0, -2.0, 0.5]) + r.normal(size=12) > 0).astype(np.float64)
    return (np.array([0.3, -0.5, 0.2]), 0.1, X, y, 0.01)


def _mlp_args():
    r = _rng()
    return (r.normal(size=(3, 4)) * 0.5, r.normal(size=4) * 0.1, r.normal(size=4) * 0.5, 0.1,
            r.normal(size=(8, 3)), r.normal(size=8))


def _sm_args():
    r = _rng()
    return (r.normal(size=(3, 4)), r.normal(size=(10, 3)), r.integers(0, 4, 10))


def _gmm_args():
    r = _rng()
    return (np.array([-1.0, 0.5, 2.0]), np.array([-0.2, 0.1, -0.4]), np.array([0.3, -0.1, 0.2]),
            r.normal(size=10))


def _bn_args():
    r = _rng()
    return (r.normal(size=(6, 3)), np.array([1.0, 0.8, 1.2]), np.array([0.1, -0.2, 0.3]))


def _krr_args():
    r = _rng()
    return (0.1, r.normal(size=(6, 2)), r.normal(size=6), 0.1)


CASES = [
    Case(logistic_regression_nll, _lr_args, (0, 1, 2, 4)),
    Case(mlp_mse, _mlp_args, (0, 1, 2, 3, 4)),
    Case(softmax_xent, _sm_args, (0, 1)),
    Case(gmm_loglik, _gmm_args, (0, 1, 2, 3)),
    Case(batchnorm_layer_loss, _bn_args, (0, 1, 2)),
    Case(rbf_kernel_ridge, _krr_args, (0, 1, 2, 3)),
    Case(svm_hinge_loss, lambda: (np.array([0.5, -0.3, 0.8]), _rng().normal(size=(10, 3)),
                                  np.where(_rng().normal(size=10) > 0, 1.0, -1.0), 0.7), (0, 1, 3)),
    Case(embedding_regression, lambda: (_rng().normal(size=(5, 3)), np.array([0, 3, 3, 1]),
                                        np.array([0.5, -0.2, 1.0])), (0, 2)),
    Case(focal_loss, lambda: (np.array([0.4, -0.6, 0.2]), _rng().normal(size=(8, 3)),
                              (np.arange(8) % 2).astype(np.float64), 2.0), (0, 1, 3)),
]
