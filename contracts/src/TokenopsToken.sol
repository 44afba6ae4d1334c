// SPDX-License-Identifier: UNLICENSED
pragma solidity ^0.8.20;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title TokenopsToken: tokenised money of one currency, with holds
/// @notice An ERC-20 whose supply only the platform's issuer key can change, and whose owners can
/// set funds aside in holds. `balanceOf` is an account's total; the part in active holds is held;
/// the rest is available. Transfers, `transferFrom` and burns only ever move available funds, so
/// a hold is a promise the token itself keeps.
/// @dev Naming: the service's spec calls paying a hold out RELEASE (`executeHold` here, ERC-1996's
/// "executeHold") and giving it back to the owner CANCEL (`cancelHold` here). ERC-1996 calls the
/// latter "releaseHold": its "release" is our CANCEL, not our RELEASE.
contract TokenopsToken is ERC20 {
    /// @notice Where a hold is in its life. `None` is the status of an id that was never used.
    /// @dev An id is never reused: an `Executed` or `Cancelled` hold keeps its id for good, so a
    /// retried `hold` with the same id is refused (`HoldExists`) rather than holding twice.
    enum HoldStatus {
        None,
        Active,
        Executed,
        Cancelled
    }

    /// @dev Packed: owner, expiresAt and status share one slot.
    struct Hold {
        address owner;
        uint64 expiresAt;
        HoldStatus status;
        address payee;
        uint256 amount;
    }

    /// @notice The caller is not allowed to do this (not the issuer, or not the hold's owner or
    /// the issuer while the hold has not expired).
    error Unauthorized(address caller);
    /// @notice The constructor was given the zero address as issuer: nobody could ever mint.
    error InvalidIssuer(address issuer);
    /// @notice A debit (transfer, burn, new hold) needs more than the account's available balance.
    error InsufficientAvailableBalance(address account, uint256 available, uint256 needed);
    /// @notice A hold of zero would be a hold of nothing; it is refused so that every hold means
    /// something.
    error ZeroAmount();
    /// @notice The id has been used before (by any owner, in any status).
    error HoldExists(bytes32 id);
    /// @notice No hold was ever created with this id.
    error UnknownHold(bytes32 id);
    /// @notice The hold was already executed or cancelled. `status` is its `HoldStatus`.
    error HoldNotActive(bytes32 id, uint8 status);
    /// @notice The hold expires (or expired) at `expiresAt`, which is not in the future: a new
    /// hold would be born expired, an existing one can no longer be executed.
    error HoldExpired(bytes32 id, uint64 expiresAt);

    /// @notice `owner` set `amount` aside for `payee` (zero: no payee) until `expiresAt` (zero:
    /// never).
    event HoldCreated(
        bytes32 indexed id, address indexed owner, address indexed payee, uint256 amount, uint64 expiresAt
    );
    /// @notice The hold was paid out to `recipient`: its payee, or its owner when it has none.
    /// A `Transfer` from owner to payee accompanies it when the two differ.
    event HoldExecuted(bytes32 indexed id, address indexed owner, address indexed recipient, uint256 amount);
    /// @notice The hold was cancelled by `by`: `amount` is available to `owner` again.
    event HoldCancelled(bytes32 indexed id, address indexed owner, address indexed by, uint256 amount);

    /// @notice The platform's issuer key: the only account that mints and burns.
    /// @dev Immutable on purpose: changing who controls the supply is a redeployment, not a call.
    address public immutable issuer;

    uint8 private immutable _decimals;

    mapping(bytes32 id => Hold) private _holds;
    mapping(address account => uint256) private _held;

    /// @param name_ the ERC-20 name
    /// @param symbol_ the ERC-20 symbol
    /// @param decimals_ the currency's minor unit (2 for EUR): one token unit is one minor unit
    /// @param issuer_ the platform's issuer key
    constructor(string memory name_, string memory symbol_, uint8 decimals_, address issuer_) ERC20(name_, symbol_) {
        if (issuer_ == address(0)) revert InvalidIssuer(issuer_);
        _decimals = decimals_;
        issuer = issuer_;
    }

    modifier onlyIssuer() {
        if (msg.sender != issuer) revert Unauthorized(msg.sender);
        _;
    }

    /// @notice The currency's minor unit, so that amounts on chain are minor units.
    function decimals() public view override returns (uint8) {
        return _decimals;
    }

    /// @notice Creates `amount` new tokens for `to`. Issuer only.
    function mint(address to, uint256 amount) external onlyIssuer {
        _mint(to, amount);
    }

    /// @notice Destroys `amount` of `from`'s available tokens. Issuer only; no allowance needed,
    /// because the issuer answers for the supply (redemption, correction). Held tokens cannot be
    /// burnt: the hold must be cancelled first, so that no hold is left without funds.
    function burn(address from, uint256 amount) external onlyIssuer {
        _burn(from, amount);
    }

    /// @notice Moves `amount` of the caller's available balance into a hold named `id`.
    /// @param id chosen by the caller, unique for ever across all owners (the service uses its own
    /// hold id, so a retried call is refused instead of holding twice)
    /// @param payee who `executeHold` pays; address(0) for none (executing then returns the funds
    /// to the owner)
    /// @param expiresAt unix seconds from which the hold is expired (it cannot be executed any
    /// more and anyone may cancel it); 0 for never
    function hold(bytes32 id, address payee, uint256 amount, uint64 expiresAt) external {
        if (amount == 0) revert ZeroAmount();
        if (_holds[id].status != HoldStatus.None) revert HoldExists(id);
        if (expiresAt != 0 && expiresAt <= block.timestamp) revert HoldExpired(id, expiresAt);
        address owner = msg.sender;
        uint256 available = availableBalanceOf(owner);
        if (amount > available) revert InsufficientAvailableBalance(owner, available, amount);

        _holds[id] =
            Hold({owner: owner, expiresAt: expiresAt, status: HoldStatus.Active, payee: payee, amount: amount});
        _held[owner] += amount;
        emit HoldCreated(id, owner, payee, amount, expiresAt);
    }

    /// @notice Pays an active, unexpired hold to its payee, or back to the owner's available
    /// balance when it has none (the spec's RELEASE).
    /// @dev The owner or the issuer may execute: the service's custody signs with the owner's key,
    /// and the issuer acts for the platform. The payee may not: it would pay itself.
    function executeHold(bytes32 id) external {
        Hold storage h = _activeHold(id);
        address owner = h.owner;
        if (msg.sender != owner && msg.sender != issuer) revert Unauthorized(msg.sender);
        if (_isExpired(h.expiresAt)) revert HoldExpired(id, h.expiresAt);

        uint256 amount = h.amount;
        h.status = HoldStatus.Executed;
        // Release the funds first, so the transfer below debits available balance like any other.
        _held[owner] -= amount;
        address recipient = h.payee == address(0) ? owner : h.payee;
        if (recipient != owner) _transfer(owner, recipient, amount);
        emit HoldExecuted(id, owner, recipient, amount);
    }

    /// @notice Returns an active hold's funds to its owner's available balance (the spec's CANCEL;
    /// ERC-1996's "release"). The owner or the issuer may cancel at any time; once the hold has
    /// expired anyone may, so that funds are never stuck behind a hold nobody completes.
    function cancelHold(bytes32 id) external {
        Hold storage h = _activeHold(id);
        address owner = h.owner;
        if (msg.sender != owner && msg.sender != issuer && !_isExpired(h.expiresAt)) {
            revert Unauthorized(msg.sender);
        }

        uint256 amount = h.amount;
        h.status = HoldStatus.Cancelled;
        _held[owner] -= amount;
        emit HoldCancelled(id, owner, msg.sender, amount);
    }

    /// @notice The part of `account`'s balance that may be transferred, burnt or held.
    /// @dev An expired hold stays held until it is cancelled: expiry allows the cancel, it does
    /// not perform it.
    function availableBalanceOf(address account) public view returns (uint256) {
        return balanceOf(account) - _held[account];
    }

    /// @notice The part of `account`'s balance in active holds (expired ones included until they
    /// are cancelled).
    function heldBalanceOf(address account) external view returns (uint256) {
        return _held[account];
    }

    /// @notice A hold as it stands; all zero with status `None` for an unused id.
    function holdOf(bytes32 id)
        external
        view
        returns (address owner, address payee, uint256 amount, uint64 expiresAt, HoldStatus status)
    {
        Hold storage h = _holds[id];
        return (h.owner, h.payee, h.amount, h.expiresAt, h.status);
    }

    /// @dev Every debit goes through here (transfer, transferFrom, burn): it may only take
    /// available funds, so held funds never leave the account except through `executeHold`.
    function _update(address from, address to, uint256 value) internal override {
        if (from != address(0)) {
            uint256 available = availableBalanceOf(from);
            if (value > available) revert InsufficientAvailableBalance(from, available, value);
        }
        super._update(from, to, value);
    }

    function _activeHold(bytes32 id) private view returns (Hold storage h) {
        h = _holds[id];
        if (h.status == HoldStatus.None) revert UnknownHold(id);
        if (h.status != HoldStatus.Active) revert HoldNotActive(id, uint8(h.status));
    }

    /// @dev Expired from `expiresAt` on (inclusive); zero never expires.
    function _isExpired(uint64 expiresAt) private view returns (bool) {
        return expiresAt != 0 && block.timestamp >= expiresAt;
    }
}
