// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {MLXToken} from "./MLXToken.sol";

/// @title One Merkle root per ledger epoch; each operator claims its payout with a proof.
/// @notice Leaf = keccak256(bytes.concat(keccak256(abi.encode(epoch, account, amount)))),
/// pairs hashed in sorted order (OpenZeppelin MerkleProof). The coordinator publishes a
/// root and its total; the total is minted here, and claims draw on it. With the root goes
/// the digest of the ledger's signed epoch record (its journal head), so anyone can check
/// the coordinator's database against the chain.
contract MerklePayoutDistributor {
    MLXToken public immutable token;
    address public immutable publisher;

    mapping(uint256 epoch => bytes32) public epochRoot;
    mapping(uint256 epoch => bytes32) public epochHead;
    mapping(uint256 epoch => uint256) public epochTotal;
    mapping(uint256 epoch => uint256) public epochClaimed;
    mapping(uint256 epoch => mapping(address account => bool)) public isClaimed;

    event EpochPublished(uint256 indexed epoch, bytes32 root, uint256 total, bytes32 head);
    event Claimed(uint256 indexed epoch, address indexed account, uint256 amount);

    error NotPublisher();
    error EpochAlreadyPublished(uint256 epoch);
    error EmptyRoot();
    error EpochNotPublished(uint256 epoch);
    error AlreadyClaimed(uint256 epoch, address account);
    error InvalidProof();
    error ExceedsEpochTotal(uint256 epoch);

    constructor(MLXToken token_) {
        token = token_;
        publisher = msg.sender;
    }

    /// @notice Anchor an epoch's payout root and journal head; an epoch is published at most once.
    function publishEpoch(uint256 epoch, bytes32 root, uint256 total, bytes32 head) external {
        if (msg.sender != publisher) revert NotPublisher();
        if (root == bytes32(0) || head == bytes32(0)) revert EmptyRoot();
        if (epochRoot[epoch] != bytes32(0)) revert EpochAlreadyPublished(epoch);
        epochRoot[epoch] = root;
        epochHead[epoch] = head;
        epochTotal[epoch] = total;
        token.mint(address(this), total);
        emit EpochPublished(epoch, root, total, head);
    }

    function leaf(uint256 epoch, address account, uint256 amount) public pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(epoch, account, amount))));
    }

    function verify(uint256 epoch, address account, uint256 amount, bytes32[] calldata proof)
        public
        view
        returns (bool)
    {
        bytes32 root = epochRoot[epoch];
        return root != bytes32(0) && MerkleProof.verifyCalldata(proof, root, leaf(epoch, account, amount));
    }

    /// @notice Anyone may submit the claim; the tokens always go to the account in the leaf.
    function claim(uint256 epoch, address account, uint256 amount, bytes32[] calldata proof) external {
        if (epochRoot[epoch] == bytes32(0)) revert EpochNotPublished(epoch);
        if (isClaimed[epoch][account]) revert AlreadyClaimed(epoch, account);
        if (!verify(epoch, account, amount, proof)) revert InvalidProof();
        if (epochClaimed[epoch] + amount > epochTotal[epoch]) revert ExceedsEpochTotal(epoch);
        isClaimed[epoch][account] = true;
        epochClaimed[epoch] += amount;
        token.transfer(account, amount);
        emit Claimed(epoch, account, amount);
    }
}
